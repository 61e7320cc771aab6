"""The stage machinery every pyramid backbone builds from: a stage's parts
(:class:`StageSpec`), the builder (:func:`build_stage`) and the module it
makes (:class:`PyramidStage`), the stochastic-depth schedule, the weight
init and the dense-output layout."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..layers import TokenBlock, build_layer, build_mixer, build_position, build_shared
from ..layers.bricks import build_norm


def drop_path_schedule(depths: Sequence[int], rate: float) -> list[list[float]]:
    """Stochastic-depth rates rising linearly over all blocks, split by stage."""
    total = sum(depths)
    rates = [rate * i / max(total - 1, 1) for i in range(total)]
    out, start = [], 0
    for d in depths:
        out.append(rates[start:start + d])
        start += d
    return out


def init_transformer_weights(module: nn.Module) -> None:
    """ViT-style init: truncated-normal linears, unit norms, fan-out convs."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.LayerNorm, nn.GroupNorm, _BatchNorm)):
        if module.weight is not None:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Conv2d):
        fan_out = module.kernel_size[0] * module.kernel_size[1] \
            * module.out_channels // module.groups
        nn.init.normal_(module.weight, 0, math.sqrt(2.0 / fan_out))
        if module.bias is not None:
            nn.init.zeros_(module.bias)


class PyramidStage(nn.Module):
    """One stage: patch embedding, blocks and (optionally) an output norm.

    ``shared``: ``(name, module)`` the mixers of all blocks use (stored once,
    under ``name``, and passed to every mixer call); ``position``: a position
    module whose term is added once, after the first block
    (``position_where='after_first_block'``) or right after the patch
    embedding (``'embed'``)."""

    def __init__(self, patch_embed: nn.Module, blocks: Sequence[nn.Module],
                 norm: Optional[nn.Module] = None,
                 shared: Optional[tuple[str, nn.Module]] = None,
                 position: Optional[nn.Module] = None,
                 position_where: str = 'after_first_block'):
        super().__init__()
        if position_where not in ('after_first_block', 'embed'):
            raise ValueError(f'PyramidStage: position_where={position_where!r}, expected '
                             "'after_first_block' or 'embed'")
        self.patch_embed = patch_embed
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm if norm is not None else nn.Identity()
        self.shared_name = None
        if shared is not None:
            self.shared_name = shared[0]
            self.add_module(*shared)
        if position is not None:
            self.position = position
        self.has_position = position is not None
        self.position_where = position_where

    @property
    def size_multiple(self) -> int:
        """What the stage's map sides must be divisible by (its mixer's need)."""
        first = self.blocks[0] if len(self.blocks) else None
        mixer = getattr(first, 'attn', None)
        return getattr(mixer, 'size_multiple', 1)


@dataclass
class StageSpec:
    """What one stage is made of; :func:`build_stage` builds it.

    Attributes:
        embed_dims: token channels.
        depth: number of blocks.
        patch_embed: the stage's embedding (stem for stage 0), built.
        mixer: token-mixer config (``None``: blocks without a mixer).
        ffn: FFN config; ``embed_dims`` and ``hidden_dims`` are filled in.
        mlp_ratio: FFN hidden channels / ``embed_dims``.
        num_heads: filled into mixers that take ``num_heads``.
        drop_path: stochastic-depth rate of each block.
        norm_cfg: the blocks' norms (``None``: none).
        out_norm_cfg: the stage's output norm (``None``: none).
        position: position-module config (see :mod:`vattn_mm.layers.builder`).
        layer_scale: initial :class:`~vattn_mm.layers.LayerScale` value.
        post_norm: normalise branch outputs instead of inputs.
    """

    embed_dims: int
    depth: int
    patch_embed: nn.Module
    mixer: Optional[Mapping[str, Any]]
    ffn: Mapping[str, Any]
    mlp_ratio: float
    num_heads: Optional[int] = None
    drop_path: Sequence[float] = ()
    norm_cfg: Optional[Mapping[str, Any]] = field(
        default_factory=lambda: dict(type='LN', eps=1e-6))
    out_norm_cfg: Optional[Mapping[str, Any]] = None
    position: Optional[Mapping[str, Any]] = None
    layer_scale: Optional[float] = None
    post_norm: bool = False


def build_stage(index: int, spec: StageSpec) -> PyramidStage:
    """Stage ``index`` of a pyramid from its :class:`StageSpec`."""
    dims = spec.embed_dims
    drop_path = list(spec.drop_path) or [0.] * spec.depth
    where, position = build_position(spec.position, dims, index)
    shared = None if spec.mixer is None else build_shared(spec.mixer, dims, spec.num_heads, index)
    ffn_args = dict(embed_dims=dims, hidden_dims=int(dims * spec.mlp_ratio))
    blocks = [
        TokenBlock(
            dims,
            None if spec.mixer is None
            else build_mixer(spec.mixer, dims, spec.num_heads, index, block=j),
            build_layer(spec.ffn, 'FFN', **ffn_args),
            drop_path=drop_path[j], norm_cfg=dict(spec.norm_cfg) if spec.norm_cfg else None,
            layer_scale=spec.layer_scale, post_norm=spec.post_norm,
            position=build_layer(position, 'position module') if where == 'block' else None)
        for j in range(spec.depth)
    ]
    norm = build_norm(dict(spec.out_norm_cfg), dims) if spec.out_norm_cfg else None
    stage_position = build_layer(position, 'position module') \
        if where in ('after_first_block', 'embed') else None
    return PyramidStage(spec.patch_embed, blocks, norm, shared, stage_position,
                        where if stage_position is not None else 'after_first_block')

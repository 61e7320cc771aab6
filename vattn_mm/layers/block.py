"""The pre-norm residual block shared by the token-based backbones, and the
feed-forward networks (over token sequences) it applies."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .. import ops
from .bricks import DropPath, build_activation, build_norm
from .builder import register_layer
from .tokens import Size, map_to_tokens, tokens_to_map


class LayerScale(nn.Module):
    """Learnable per-channel residual scaling (CaiT, arXiv:2103.17239)."""

    def __init__(self, dims: int, init_value: float):
        super().__init__()
        self.weight = nn.Parameter(torch.full((dims, ), init_value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class TokenBlock(nn.Module):
    """``x + drop_path(ls1(mixer(norm1(x)))) -> x + drop_path(ls2(ffn(norm2(x))))``.

    ``position`` (optional, stored as ``pos_embed``): a position module
    applied first (:func:`apply_position`: ``x + pos_embed(x)``,
    DilateFormer's per-block CPE).

    ``mixer`` and ``ffn`` are called as ``module(tokens, (H, W))``; extra
    positional arguments of the block go to the mixer (P2T's pooling convs).
    A block without a token mixer (``mixer=None``) is just the FFN half, as in
    the early LITv2 stages.  ``layer_scale`` enables :class:`LayerScale`;
    ``post_norm`` normalises each branch's output instead of its input
    (``x + drop_path(ls1(norm1(mixer(x))))``, FocalNet-L/XL/H ``use_postln``).

    ``inplace=True`` (only without autograd, for an input nobody else reads
    afterwards, as :meth:`PyramidBackbone.run_stage` passes it in inference)
    adds the residuals into ``x`` itself: one map less alive per block.

    ``norm_cfg=None``: no norms, ``x + mixer(x) -> x + ffn(x)`` (EfficientViT,
    whose mixer and FFN end in their own BatchNorm).
    """

    def __init__(self, embed_dims: int, mixer: Optional[nn.Module], ffn: nn.Module,
                 drop_path: float = 0., norm_cfg: Optional[dict] = dict(type='LN', eps=1e-6),
                 layer_scale: Optional[float] = None, post_norm: bool = False,
                 position: Optional[nn.Module] = None):
        super().__init__()
        self.post_norm = post_norm
        if position is not None:
            self.pos_embed = position
        self.has_position = position is not None
        def norm() -> nn.Module:
            return build_norm(norm_cfg, embed_dims) if norm_cfg else nn.Identity()

        if mixer is not None:
            self.norm1 = norm()
            self.attn = mixer
        self.norm2 = norm()
        self.ffn = ffn
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        scaled = layer_scale is not None
        self.ls1 = LayerScale(embed_dims, layer_scale) if scaled and mixer is not None \
            else nn.Identity()
        self.ls2 = LayerScale(embed_dims, layer_scale) if scaled else nn.Identity()
        self.has_mixer = mixer is not None
        self.recompute_norm = ops.switch('recompute_norm')

    def forward(self, x: torch.Tensor, hw: Size, *mixer_args, inplace: bool = False
                ) -> torch.Tensor:
        add = residual_add(inplace)
        if self.has_position:
            x = apply_position(self.pos_embed, x, hw, inplace)
        if self.has_mixer:
            x = add(x, self.drop_path(self.ls1(
                self._branch(self.attn, self.norm1, x, hw, *mixer_args))))
        return add(x, self.drop_path(self.ls2(self._branch(self.ffn, self.norm2, x, hw))))

    def _branch(self, module: nn.Module, norm: nn.Module, x: torch.Tensor,
                hw: Size, *args) -> torch.Tensor:
        if self.post_norm:
            return norm(module(x, hw, *args))
        # training: y is not stored for the backward (fast path recompute_norm)
        with ops.norm_recomputed(x, norm, self.recompute_norm) as y:
            return module(y, hw, *args)


def residual_add(inplace: bool):
    """``x + y``, or ``x.add_(y)`` (in place, refused under autograd)."""
    if not inplace:
        return torch.add
    if torch.is_grad_enabled():
        raise RuntimeError('in-place residuals are for inference (torch.no_grad) only')
    return torch.Tensor.add_


def apply_position(position: nn.Module, x: torch.Tensor, hw: Size,
                   inplace: bool = False) -> torch.Tensor:
    """The tokens ``x`` with a position module's output: ``x + position(x)``,
    or ``x * position(x)`` for a gate (``combine = 'multiply'``); in place
    with ``inplace`` (inference only, as :func:`residual_add`)."""
    term = position(x, hw)
    if getattr(position, 'combine', 'add') == 'multiply':
        if not inplace:
            return x * term
        if torch.is_grad_enabled():
            raise RuntimeError('in-place position gates are for inference (torch.no_grad) only')
        return x.mul_(term)
    return residual_add(inplace)(x, term)


@register_layer
class MLP(nn.Module):
    """``fc1 -> act -> drop -> fc2 -> drop`` over tokens (the ViT FFN); called
    as ``mlp(tokens, hw)`` like the other FFNs, ``hw`` unused.

    Fast paths (:mod:`vattn_mm.ops`): in inference long sequences run
    ``chunk_tokens`` tokens at a time (``mlp_inference_chunks``;
    ``chunk_tokens=None`` turns it off) and ``fc1 + act`` is one fused call
    (``fused_act``); in training the hidden activation is recomputed in the
    backward instead of being kept (``recompute_act``).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'), drop: float = 0.,
                 chunk_tokens: Optional[int] = 4096):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)
        self.chunk_tokens = chunk_tokens
        self.mlp_inference_chunks = ops.switch('mlp_inference_chunks')
        self.fused_act = ops.switch('fused_act')
        self.recompute_act = ops.switch('recompute_act')

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        if torch.is_grad_enabled():
            return self.drop(ops.act_linear(self.fc1(x), self.act, self.fc2, self.drop,
                                            self.recompute_act))
        return ops.token_chunks(self._inference, x, self.chunk_tokens, self.mlp_inference_chunks)

    def _inference(self, x: torch.Tensor) -> torch.Tensor:
        x = ops.linear_act(x, self.fc1, self.act, self.fused_act)
        return self.drop(self.fc2(self.drop(x)))


@register_layer
class ConvFFN(nn.Module):
    """FFN with a 3x3 depthwise convolution between its two projections
    (PVTv2, arXiv:2106.13797): ``fc1 -> [pre_act] -> dwconv -> act -> fc2``.

    Args:
        embed_dims: token channels.
        hidden_dims: hidden channels.
        act_cfg: activation after the depthwise conv.
        pre_act_cfg: optional activation right after ``fc1`` (PVTv2-li: ReLU).
        drop: dropout after the activation and after ``fc2``.

    Fast paths (:mod:`vattn_mm.ops`): in eager training the FFN runs over
    groups of hidden channels and keeps only the ``fc1`` and ``dwconv``
    outputs for the backward (``ffn_hidden_groups``), else recomputes the
    activation before ``fc2`` (``recompute_act``); in inference linear / conv
    and activation are fused (``fused_act``).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'),
                 pre_act_cfg: Optional[dict] = None, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.pre_act = build_activation(pre_act_cfg) if pre_act_cfg else nn.Identity()
        self.dwconv = ops.DepthwiseConv2d(hidden_dims, 3)
        self.act = build_activation(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)
        self.ffn_hidden_groups = ops.switch('ffn_hidden_groups')
        self.fused_act = ops.switch('fused_act')
        self.recompute_act = ops.switch('recompute_act')

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        if not torch.is_grad_enabled():
            x = tokens_to_map(ops.linear_act(x, self.fc1, self.pre_act, self.fused_act), hw)
            x, _ = map_to_tokens(self.dwconv.forward_act(x, self.act))
            return self.drop(self.fc2(self.drop(x)))
        parts = ops.ConvFFNParts(self.fc1, self.pre_act, self.dwconv, self.act, self.fc2,
                                 self.drop)
        if ops.hidden_groups_apply(parts, x, self.ffn_hidden_groups):
            return ops.conv_ffn_in_hidden_groups(parts, x, hw)
        x, _ = map_to_tokens(self.dwconv(tokens_to_map(self.pre_act(self.fc1(x)), hw)))
        return self.drop(ops.act_linear(x, self.act, self.fc2, self.drop, self.recompute_act))

"""The generic pyramid skeleton: four stages of patch embedding + blocks of a
configurable token mixer and FFN (MetaFormer, Yu et al., CVPR 2022,
arXiv:2111.11418, in the PVTv2 layout)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from ..layers import build_layer
from ..layers.builder import as_stage_list
from .base import CheckArchs, PyramidBackbone
from .registry import register_backbone
from .stage import StageSpec, drop_path_schedule

Cfg = Mapping[str, Any]
_PVT = dict(num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])


@register_backbone
class TokenPyramid(PyramidBackbone):
    """A pyramid backbone whose token mixer, FFN, patch embedding and position
    module are configs: any registered mixer works in any stage.

    Args:
        arch: ``'b0'``, ``'b1'``, ``'b2'`` (PVTv2 widths and depths) or a dict
            with ``embed_dims``, ``depths``, ``num_heads``, ``mlp_ratios`` (one
            entry per stage).
        mixer: token mixer config, one for every stage or a list with one per
            stage, e.g. ``dict(type='SpatialReductionAttention', sr_ratio=8)``;
            ``embed_dims`` / ``num_heads`` and the mixer's own per-stage
            defaults are filled in (``dict(type='HiLoAttention')`` is
            complete; see :mod:`vattn_mm.layers.builder`).  ``None`` in a list:
            that stage's blocks have no mixer (FFN only).
        ffn: FFN config (one or per stage); ``embed_dims`` / ``hidden_dims``
            are filled in.  Default ``ConvFFN`` (PVTv2).
        patch_embed: embedding config (one or per stage) with
            ``in_channels`` / ``embed_dims`` / ``stride`` (4 for stage 0, 2
            after) filled in: ``OverlapPatchEmbed`` (default, 7x7 then 3x3
            kernels) or ``NonOverlapPatchEmbed``.
        stem: config replacing stage 0's embedding, e.g.
            ``dict(type='ConvStem', hidden_dims=(32, 64))`` or
            ``dict(type='CeiTImageToTokens')`` (any tokeniser with the
            ``'stem'`` role, :data:`~vattn_mm.layers.TOKENISERS`).
        position: position-module config (one or per stage), e.g.
            ``dict(type='ConvPosEnc')`` (before every block) or
            ``dict(type='SinCosPosEmbed')`` (after the embedding; any of
            :data:`~vattn_mm.layers.POSITIONS`).
        norm_cfg: the blocks' norms.
        out_norm_cfg: norm of each stage output, which also feeds the next
            stage (PVTv2); ``None``: none (P2T).
        layer_scale: initial LayerScale value (``None``: no layer scale).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.

    Input sizes: the embeddings give ``ceil(side / stride)`` maps; a mixer
    that needs divisible maps (``size_multiple``) makes the backbone pad its
    input and crop the outputs back.
    """

    arch_zoo = {
        'b0': dict(_PVT, embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2]),
        'b1': dict(_PVT, embed_dims=[64, 128, 320, 512], depths=[2, 2, 2, 2]),
        'b2': dict(_PVT, embed_dims=[64, 128, 320, 512], depths=[3, 4, 6, 3]),
    }
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios')
    check_archs = CheckArchs(
        micro=dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 2, 1, 1]),
        micro_kwargs=dict(mixer=[dict(type='SpatialReductionAttention'),
                                 dict(type='HiLoAttention'), dict(type='PyramidPoolingAttention'),
                                 dict(type='FocalModulation')],
                          position=dict(type='ConvPosEnc')),
        representative='b1', timed=False)

    def __init__(self, arch: Union[str, Cfg] = 'b1',
                 mixer: Union[Cfg, Sequence[Optional[Cfg]]] = dict(
                     type='SpatialReductionAttention'),
                 ffn: Union[Cfg, Sequence[Cfg]] = dict(type='ConvFFN'),
                 patch_embed: Union[Cfg, Sequence[Cfg]] = dict(type='OverlapPatchEmbed'),
                 stem: Optional[Cfg] = None,
                 position: Union[Cfg, None, Sequence[Optional[Cfg]]] = None,
                 norm_cfg: Cfg = dict(type='LN', eps=1e-6),
                 out_norm_cfg: Optional[Cfg] = dict(type='LN', eps=1e-6),
                 layer_scale: Optional[float] = None,
                 in_channels: int = 3, drop_path_rate: float = 0.1, **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        n = self.num_stages
        dims = a['embed_dims']
        mixers = as_stage_list(mixer, n, 'mixer')
        ffns = as_stage_list(ffn, n, 'ffn')
        embeds = as_stage_list(patch_embed, n, 'patch_embed')
        positions = as_stage_list(position, n, 'position')
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        specs = []
        for i, depth in enumerate(a['depths']):
            prev = in_channels if i == 0 else dims[i - 1]
            if i == 0 and stem is not None:
                embed = build_layer(stem, 'stem', in_channels=prev, embed_dims=dims[0])
            else:
                embed = build_layer(embeds[i], 'patch embedding', in_channels=prev,
                                    embed_dims=dims[i], stride=4 if i == 0 else 2)
            specs.append(StageSpec(
                dims[i], depth, embed, mixers[i], ffns[i], a['mlp_ratios'][i],
                num_heads=a['num_heads'][i], drop_path=dpr[i], norm_cfg=norm_cfg,
                out_norm_cfg=out_norm_cfg, position=positions[i], layer_scale=layer_scale))
        self.build_stages(specs)

"""PVTv2: Improved Baselines with Pyramid Vision Transformer
(Wang et al., CVMJ 2022, arXiv:2106.13797)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from mmcv.cnn import build_norm_layer
from mmengine.registry import MODELS
from torch import nn

from ..checkpoint import PVTV2_CONVERTER
from ..layers import ConvFFN, OverlapPatchEmbed, SpatialReductionAttention, TokenBlock
from .base import PyramidBackbone, PyramidStage, drop_path_schedule

_B = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8],
          mlp_ratios=[8, 8, 4, 4], sr_ratios=[8, 4, 2, 1])


@MODELS.register_module()
class PVTv2(PyramidBackbone):
    """PVTv2 backbone: overlapping patch embeddings, spatial-reduction
    attention (conv SR or, for ``linear=True``, pooled "linear" SR) and
    depthwise-conv FFNs; outputs the normalised tokens of each stage.

    Args:
        arch: ``'b0'``, ``'b1'``, ``'b2'``, ``'b2_li'``, ``'b3'``, ``'b4'``,
            ``'b5'`` or a dict with the official names (``embed_dims``,
            ``num_heads``, ``mlp_ratios``, ``depths``, ``sr_ratios`` and
            optionally ``linear``, ``qkv_bias``).
        in_channels: image channels.
        stem: config of the first-stage embedding replacing the 7x7 patch
            embed, e.g. ``dict(type='ConvStem', hidden_dims=(32, 64))``
            (``in_channels`` / ``embed_dims`` are filled in).
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg: see
            :class:`PyramidBackbone`.

    Any input size works: sizes come from the convolutions (a side ``s``
    becomes ``ceil(s / 4)`` then is halved with ceiling per stage), so a side
    not divisible by 32 just gives ceil-sized maps, as in the official code.
    """

    arch_zoo = {
        'b0': dict(_B, embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2]),
        'b1': dict(_B, depths=[2, 2, 2, 2]),
        'b2': dict(_B, depths=[3, 4, 6, 3]),
        'b2_li': dict(_B, depths=[3, 4, 6, 3], linear=True),
        'b3': dict(_B, depths=[3, 4, 18, 3]),
        'b4': dict(_B, depths=[3, 8, 27, 3]),
        'b5': dict(_B, depths=[3, 6, 40, 3], mlp_ratios=[4, 4, 4, 4]),
    }
    arch_defaults = dict(linear=False, qkv_bias=True)
    arch_ignored = PyramidBackbone.arch_ignored | {'patch_size'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'sr_ratios')
    converter = PVTV2_CONVERTER

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'b2',
                 in_channels: int = 3, stem: Optional[dict] = None,
                 drop_path_rate: float = 0.1, **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        dims = a['embed_dims']
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        stages = []
        for i, depth in enumerate(a['depths']):
            prev = in_channels if i == 0 else dims[i - 1]
            if i == 0 and stem is not None:
                patch_embed = MODELS.build(dict(stem, in_channels=prev, embed_dims=dims[0]))
            elif i == 0:
                patch_embed = OverlapPatchEmbed(prev, dims[0], kernel_size=7, stride=4)
            else:
                patch_embed = OverlapPatchEmbed(prev, dims[i], kernel_size=3, stride=2)
            blocks = [
                TokenBlock(
                    dims[i],
                    SpatialReductionAttention(dims[i], a['num_heads'][i], a['sr_ratios'][i],
                                              linear=a['linear'], qkv_bias=a['qkv_bias']),
                    ConvFFN(dims[i], dims[i] * a['mlp_ratios'][i],
                            pre_act_cfg=dict(type='ReLU') if a['linear'] else None),
                    drop_path=dpr[i][j])
                for j in range(depth)
            ]
            norm = build_norm_layer(dict(type='LN', eps=1e-6), dims[i])[1]
            stages.append(PyramidStage(patch_embed, blocks, norm))
        self.stages = nn.ModuleList(stages)

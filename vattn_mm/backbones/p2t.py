"""P2T: Pyramid Pooling Transformer for Scene Understanding
(Wu et al., TPAMI 2022, arXiv:2106.12011)."""
from __future__ import annotations

from typing import Any, Mapping, Union

import torch
from mmengine.registry import MODELS
from torch import nn

from ..checkpoint import P2T_CONVERTER
from ..layers import (ConvFFN, OverlapPatchEmbed, PyramidPoolingAttention, TokenBlock,
                      make_pool_convs, tokens_to_map)
from .base import PyramidBackbone, PyramidStage, dense_output, drop_path_schedule

_S = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])

#: the official pooling ratios, hard-coded for every released variant
P2T_POOL_RATIOS = ((12, 16, 20, 24), (6, 8, 10, 12), (3, 4, 5, 6), (1, 2, 3, 4))


@MODELS.register_module()
class P2T(PyramidBackbone):
    """Pyramid Pooling Transformer backbone: overlapping patch embeddings,
    pyramid-pooling attention (keys / values from several adaptive average
    poolings of the map, each refined by a depthwise 3x3 conv that all blocks
    of the stage share) and inverted-residual FFNs with Hardswish.  Outputs
    are the raw stage tokens (P2T has no output norms).

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'``, ``'large'`` or a dict with
            the official names (``embed_dims``, ``num_heads``, ``mlp_ratios``,
            ``depths`` and optionally ``qkv_bias``, ``pool_ratios`` - one list
            of ratios per stage, default the official hard-coded
            ``[[12, 16, 20, 24], [6, 8, 10, 12], [3, 4, 5, 6], [1, 2, 3, 4]]``).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks (the
            official dense backbones use 0.1 for tiny/small, 0.3 for
            base/large).
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg: see
            :class:`PyramidBackbone`.

    Any input size works: sizes are read from the convolutions (a side ``s``
    becomes ``ceil(s / 4)``, then is halved with ceiling per stage), as in the
    official classification ``forward_for_fpn``.  A pooled side is
    ``round(side / ratio)`` (banker's rounding, as official) but at least 1,
    so inputs of 64 px or less, where the official code fails on an empty
    pooled map, pool to a global average instead.
    """

    arch_zoo = {
        'tiny': dict(_S, embed_dims=[48, 96, 240, 384], depths=[2, 2, 6, 3]),
        'small': dict(_S, depths=[2, 2, 9, 3]),
        'base': dict(_S, depths=[3, 4, 18, 3]),
        'large': dict(_S, embed_dims=[64, 128, 320, 640], depths=[3, 8, 27, 3]),
    }
    arch_defaults = dict(qkv_bias=True, pool_ratios=P2T_POOL_RATIOS)
    arch_ignored = PyramidBackbone.arch_ignored | {'patch_size', 'img_size'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'pool_ratios')
    converter = P2T_CONVERTER

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'small',
                 in_channels: int = 3, drop_path_rate: float = 0.1, **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        dims = a['embed_dims']
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        stages = []
        for i, depth in enumerate(a['depths']):
            if i == 0:
                patch_embed = OverlapPatchEmbed(in_channels, dims[0], kernel_size=7, stride=4)
            else:
                patch_embed = OverlapPatchEmbed(dims[i - 1], dims[i], kernel_size=3, stride=2)
            hswish = dict(type='HSwish')
            blocks = [
                TokenBlock(
                    dims[i],
                    PyramidPoolingAttention(dims[i], a['num_heads'][i], a['pool_ratios'][i],
                                            qkv_bias=a['qkv_bias']),
                    ConvFFN(dims[i], int(dims[i] * a['mlp_ratios'][i]),
                            act_cfg=hswish, pre_act_cfg=hswish),
                    drop_path=dpr[i][j])
                for j in range(depth)
            ]
            stages.append(PyramidStage(
                patch_embed, blocks,
                pool_convs=make_pool_convs(dims[i], len(a['pool_ratios'][i]))))
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Returns the NCHW stage maps of ``out_indices`` (strides 4/8/16/32)."""
        outs = []
        for i, stage in enumerate(self.stages):
            tokens, hw = stage.patch_embed(x)
            tokens = self.run_blocks(stage.blocks, tokens, hw, stage.pool_convs)
            x = tokens_to_map(tokens, hw)
            if i in self.out_indices:
                outs.append(dense_output(x))
        return tuple(outs)

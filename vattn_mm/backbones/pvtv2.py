"""PVTv2: Improved Baselines with Pyramid Vision Transformer
(Wang et al., CVMJ 2022, arXiv:2106.13797)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from .base import CheckArchs
from .keymap import KeyMap
from .loading import FamilyConverter
from .registry import register_backbone
from .token_pyramid import TokenPyramid

_B = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8],
          mlp_ratios=[8, 8, 4, 4], sr_ratios=[8, 4, 2, 1])

#: official (whai362/PVT ``pvt_v2.py``) stage modules, shared by the
#: PVT-style families (PVTv2, QuadTree)
PVT_STAGE_RULES = (
    ('patch_embed{s+1}.', 'stages.{s}.patch_embed.'),
    ('block{s+1}.', 'stages.{s}.blocks.'),
    ('norm{s+1}.', 'stages.{s}.norm.'),
    ('.mlp.dwconv.dwconv.', '.ffn.dwconv.'),
    ('.mlp.', '.ffn.'),
)


@register_backbone
class PVTv2(TokenPyramid):
    """PVTv2 backbone: the :class:`TokenPyramid` with spatial-reduction
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
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`~vattn_mm.backbones.base.PyramidBackbone`.

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
    arch_ignored = TokenPyramid.arch_ignored | {'patch_size'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'sr_ratios')
    check_archs = CheckArchs(
        micro=dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1]),
        representative='b2')
    converter = FamilyConverter(
        family='pvtv2',
        keymap=KeyMap(PVT_STAGE_RULES),
        classification_only=(r'^head\.', ),
    )

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'b2',
                 in_channels: int = 3, stem: Optional[dict] = None,
                 drop_path_rate: float = 0.1, **kwargs):
        a = self.parse_arch(arch)[1]
        super().__init__(
            arch,
            mixer=[dict(type='SpatialReductionAttention', sr_ratio=ratio, linear=a['linear'],
                        qkv_bias=a['qkv_bias']) for ratio in a['sr_ratios']],
            ffn=dict(type='ConvFFN', pre_act_cfg=dict(type='ReLU') if a['linear'] else None),
            stem=stem, in_channels=in_channels, drop_path_rate=drop_path_rate, **kwargs)

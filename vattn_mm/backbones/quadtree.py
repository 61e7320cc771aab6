"""QuadTree Attention for Vision Transformers (Tang et al., ICLR 2022,
arXiv:2201.02767): the PVTv2 skeleton with quadtree attention."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from .base import CheckArchs
from .keymap import KeyMap
from .loading import FamilyConverter
from .pvtv2 import PVT_STAGE_RULES
from .registry import register_backbone
from .token_pyramid import TokenPyramid

_B = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8],
          mlp_ratios=[8, 8, 4, 4], sr_ratios=[4, 3, 2, 1])

#: official dense (detection / segmentation) settings
DENSE_TOPKS = [32, 32, 32, 32]
DENSE_VALUE_ACT = 'ReLU'
#: settings of the ImageNet models (``classification/quadtree_attention.py``)
CLS_TOPKS = [8, 8, 8, 8]
CLS_VALUE_ACT = 'GELU'


@register_backbone
class QuadTree(TokenPyramid):
    """QuadTree backbone (QuadTree-A / -B): the :class:`TokenPyramid` with
    quadtree attention and depthwise-conv FFNs; outputs the normalised tokens
    of each stage, like :class:`PVTv2`.

    Args:
        arch: ``'b0'`` ... ``'b4'`` or a dict with the official names
            (``embed_dims``, ``num_heads``, ``mlp_ratios``, ``depths``,
            ``sr_ratios`` = quadtree levels per stage, optionally
            ``qkv_bias``, ``attn_type``, ``topks``, ``value_branch_act``).
        attn_type: ``'B'`` (released checkpoints) or ``'A'``; overrides arch.
        topks: top-k per pyramid level, index 0 = coarsest; overrides arch.
            Default: the official dense value ``[32] * 4``
            (:data:`CLS_TOPKS` = ``[8] * 4`` reproduces the ImageNet model).
        value_branch_act: activation of the type-B value branches, ``'ReLU'``
            (official dense default) or ``'GELU'`` (ImageNet model; what the
            released checkpoints were trained with) or an mmcv act config;
            overrides arch.
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.

    Size rule: every stage's quadtree needs its map divisible by
    ``2 ** (levels - 1)`` (official: input divisible by 32).  Other inputs are
    zero-padded at the bottom / right to :attr:`size_multiple` (exactly what
    mmdet's ``pad_size_divisor=32`` does to a normalised batch), and the
    outputs are cropped to ``ceil(side / stride)``, the sizes PVTv2 gives, so
    every input size works and divisible inputs are untouched (the generic
    :class:`TokenPyramid` rule for mixers with a ``size_multiple``).  Top-k values
    larger than a level's candidates (small inputs) are clamped, logged once.
    """

    arch_zoo = {
        'b0': dict(_B, embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2]),
        'b1': dict(_B, depths=[2, 2, 2, 2]),
        'b2': dict(_B, depths=[3, 4, 6, 3]),
        'b3': dict(_B, depths=[3, 4, 18, 3]),
        'b4': dict(_B, depths=[3, 8, 27, 3]),
    }
    arch_defaults = dict(qkv_bias=True, attn_type='B', topks=DENSE_TOPKS,
                         value_branch_act=DENSE_VALUE_ACT)
    arch_ignored = TokenPyramid.arch_ignored | {'patch_size'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'sr_ratios')
    check_archs = CheckArchs(
        micro=dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 1, 1, 1], sr_ratios=[4, 3, 2, 1]),
        representative='b2')
    #: official keys (Tangshitao/QuadTreeAttention ``classification/quadtree.py``,
    #: ``detection/quadtree.py``): the PVTv2 tree with the attention's nested
    #: ``py_att`` module flattened
    converter = FamilyConverter(
        family='quadtree',
        keymap=KeyMap(PVT_STAGE_RULES + (
            ('.attn.py_att.weight', '.attn.level_logits'),
            ('.attn.py_att.get_vs.', '.attn.lepe_convs.'),
            ('.attn.value_branchs.', '.attn.value_downsamples.'),
        )),
        classification_only=(r'^head\.', ),
    )

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'b2',
                 attn_type: Optional[str] = None,
                 topks: Optional[Sequence[int]] = None,
                 value_branch_act: Optional[Union[str, dict]] = None,
                 in_channels: int = 3, drop_path_rate: float = 0.1, **kwargs):
        a = self.parse_arch(arch)[1]
        overrides = {key: value for key, value in (
            ('attn_type', attn_type), ('topks', topks), ('value_branch_act', value_branch_act))
            if value is not None}
        a.update(overrides)
        act = a['value_branch_act'] or DENSE_VALUE_ACT
        levels = a['sr_ratios']
        if len(a['topks']) < max(levels):
            raise ValueError(f'QuadTree: topks {list(a["topks"])} has fewer entries '
                             f'than the {max(levels)} quadtree levels (sr_ratios {levels})')
        mixers = [dict(type='QuadtreeAttention', num_levels=n, topks=a['topks'],
                       attn_type=a['attn_type'], qkv_bias=a['qkv_bias'],
                       value_act_cfg=dict(type=act) if isinstance(act, str) else dict(act))
                  for n in levels]
        super().__init__(arch, mixer=mixers, in_channels=in_channels,
                         drop_path_rate=drop_path_rate, **kwargs)
        self.arch.update(overrides)

    @classmethod
    def imagenet_settings(cls, arch, official_sd=None) -> tuple[dict, dict]:
        """The ImageNet QuadTree hard-codes top-k 8 and GELU value branches."""
        return dict(topks=list(CLS_TOPKS), value_branch_act=CLS_VALUE_ACT), {}

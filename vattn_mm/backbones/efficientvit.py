"""EfficientViT (MIT): Multi-Scale Linear Attention for High-Resolution Dense
Prediction (Cai et al., ICCV 2023, arXiv:2205.14756), the B-series backbone."""
from __future__ import annotations

from typing import Any, Mapping, Union

import torch
from torch import nn

from ..layers import ConvNormAct, DSConv, build_layer
from ..layers.lite_mla import OFFICIAL_ACTS, OFFICIAL_NORMS
from ..layers.mbconv import EfficientViTEmbed
from .base import CheckArchs, PyramidBackbone
from .stage import StageSpec, drop_path_schedule
from .keymap import KeyMap
from .loading import FamilyConverter
from .registry import register_backbone

Cfg = Mapping[str, Any]
#: BatchNorm eps of the B series (the model zoo's ``set_norm_eps``)
B_SERIES_NORM_EPS = 1e-5
#: LiteMLA aggregation kernels of every EfficientViT block
LITE_MLA_SCALES = (5, )
#: stages (0-based, stride 4 first) whose blocks are plain MBConvs; the later
#: ones are EfficientViT blocks (LiteMLA + MBConv)
CONV_STAGES = 2


@register_backbone
class EfficientViT(PyramidBackbone):
    """EfficientViT (MIT, B series; not Microsoft's EfficientViT).

    A convolutional stem (3x3 stride-2 conv, then ``depth_list[0]`` residual
    depthwise-separable convs), two stages of MBConvs and two stages of
    EfficientViT blocks: residual :class:`~vattn_mm.layers.LiteMLA` (ReLU
    linear attention with multi-scale 5x5 token aggregation) then residual
    MBConv.  Each stage starts with a stride-2 MBConv (its
    ``patch_embed``; in the attention stages with biases and only the last
    BN), so a side ``s`` gives ``ceil(s / 2)`` halved with ceiling per stage:
    any input size works.  BatchNorm (eps 1e-5) and Hardswish throughout; no
    output norms: the outputs are the official ``stage1``..``stage4`` maps.

    The blocks run on (B, N, C) tokens like every pyramid here: an MBConv
    views them as a channels-last map, whose convolutions stay channels-last.

    Args:
        arch: ``'b0'``, ``'b1'``, ``'b2'``, ``'b3'`` or a dict with the
            official names: ``width_list`` (stem + 4 stages), ``depth_list``
            (stem DSConvs, MBConvs of stages 1-2 including the stride-2 one,
            EfficientViT blocks of stages 3-4), ``dim`` (LiteMLA channels per
            head) and optionally ``in_channels``, ``expand_ratio``, ``norm``
            (``'bn2d'``), ``act_func``, ``head_width_list`` (the ImageNet
            classifier's widths, see :meth:`imagenet_head`).
        drop_path_rate: stochastic depth over the residual blocks (the
            official backbone has none: default 0).
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.
    """

    arch_zoo = {
        'b0': dict(width_list=[8, 16, 32, 64, 128], depth_list=[1, 2, 2, 2, 2], dim=16,
                   head_width_list=[1024, 1280]),
        'b1': dict(width_list=[16, 32, 64, 128, 256], depth_list=[1, 2, 3, 3, 4], dim=16,
                   head_width_list=[1536, 1600]),
        'b2': dict(width_list=[24, 48, 96, 192, 384], depth_list=[1, 3, 4, 4, 6], dim=32,
                   head_width_list=[2304, 2560]),
        'b3': dict(width_list=[32, 64, 128, 256, 512], depth_list=[1, 4, 6, 6, 9], dim=32,
                   head_width_list=[2304, 2560]),
    }
    arch_defaults = dict(in_channels=3, expand_ratio=4, norm='bn2d', act_func='hswish',
                         head_width_list=None)
    #: classification-model settings of the official fixtures / constructors
    arch_ignored = PyramidBackbone.arch_ignored | {'n_classes', 'output_keys', 'dropout'}
    check_archs = CheckArchs(
        micro=dict(width_list=[8, 16, 24, 32, 48], depth_list=[1, 2, 2, 1, 1], dim=16),
        representative='b2', timed=False)
    #: official keys (mit-han-lab/efficientvit ``EfficientViTCls``: ``backbone.*``
    #: and the classifier ``head.*``): ``input_stem.op_list.0`` / ``.{k}.main``
    #: -> the stem in ``stages.0.patch_embed.input_stem``; official
    #: ``stages.{s}.op_list.0.main`` (stride-2 MBConv) -> ``stages.{s}.patch_embed.downsample``;
    #: ``op_list.{j+1}.main`` (MBConv blocks of stages 0-1) -> ``blocks.{j}.ffn``;
    #: ``context_module.main`` / ``local_module.main`` -> ``blocks.{j}.attn`` / ``.ffn``.
    converter = FamilyConverter(
        family='efficientvit',
        keymap=KeyMap((
            ('input_stem.op_list.0.', 'stages.0.patch_embed.input_stem.0.'),
            ('input_stem.op_list.{k}.main.', 'stages.0.patch_embed.input_stem.{k}.'),
            ('stages.{s}.op_list.0.main.', 'stages.{s}.patch_embed.downsample.'),
            *((f'stages.{s}.op_list.{{j+1}}.main.', f'stages.{s}.blocks.{{j}}.ffn.')
              for s in range(CONV_STAGES)),
            ('stages.{s}.op_list.{j+1}.context_module.main.', 'stages.{s}.blocks.{j}.attn.'),
            ('stages.{s}.op_list.{j+1}.local_module.main.', 'stages.{s}.blocks.{j}.ffn.'),
        )),
        classification_only=(r'^head\.', ),
        official_prefix='backbone.',
    )
    official_wrapper = 'state_dict'
    classifier_head_keys = KeyMap((
        ('head.op_list.0.', 'neck.conv.'),
        ('head.op_list.2.linear.', 'neck.fc.'),
        ('head.op_list.2.norm.', 'neck.norm.'),
        ('head.op_list.3.linear.', 'head.fc.'),
    ))

    def __init__(self, arch: Union[str, Cfg] = 'b1', drop_path_rate: float = 0., **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        widths, depths = a['width_list'], a['depth_list']
        norm = dict(type=OFFICIAL_NORMS[a['norm']], eps=B_SERIES_NORM_EPS)
        act = dict(OFFICIAL_ACTS[a['act_func']])
        self.norm_cfg, self.act_cfg = norm, act

        def mbconv(in_dims: int, out_dims: int, stride: int, fewer_norm: bool) -> dict:
            return dict(type='MBConv', embed_dims=in_dims, out_dims=out_dims, stride=stride,
                        hidden_dims=round(in_dims * a['expand_ratio']),
                        use_bias=(True, True, False) if fewer_norm else False,
                        norm_cfg=(None, None, norm) if fewer_norm else norm,
                        act_cfg=(act, act, None))

        blocks = [depths[i + 1] - (1 if i < CONV_STAGES else 0) for i in range(4)]
        dpr = drop_path_schedule(blocks, drop_path_rate)
        stem = nn.Sequential(
            ConvNormAct(a['in_channels'], widths[0], 3, 2, norm_cfg=norm, act_cfg=act),
            *(DSConv(widths[0], widths[0], norm_cfg=norm, act_cfg=(act, None), residual=True)
              for _ in range(depths[0])))
        specs = []
        for i in range(4):
            attention = i >= CONV_STAGES
            down = build_layer(mbconv(widths[i], widths[i + 1], 2, attention), 'downsample')
            mixer = dict(type='LiteMLA', head_dims=a['dim'], scales=LITE_MLA_SCALES,
                         use_bias=False, norm_cfg=(None, norm), act_cfg=(None, None),
                         kernel_cfg=dict(type='ReLU')) if attention else None
            ffn = mbconv(widths[i + 1], widths[i + 1], 1, attention)
            del ffn['embed_dims']   # filled in by the stage builder
            specs.append(StageSpec(
                widths[i + 1], blocks[i], EfficientViTEmbed(down, stem if i == 0 else None),
                mixer=mixer, ffn=ffn, mlp_ratio=a['expand_ratio'], drop_path=dpr[i],
                norm_cfg=None))
        self.build_stages(specs)

    @classmethod
    def stage_count(cls, arch: Mapping[str, Any]) -> int:
        return len(arch['depth_list']) - 1

    @classmethod
    def parse_arch(cls, arch: Union[str, Cfg]) -> tuple[str, dict]:
        name, parsed = super().parse_arch(arch)
        widths, depths = parsed['width_list'], parsed['depth_list']
        if len(widths) != 5 or len(depths) != 5:
            raise ValueError(f'EfficientViT: width_list {widths} and depth_list {depths} need '
                             '5 entries each (stem, stage1..stage4)')
        if min(depths[1:CONV_STAGES + 1]) < 1 or min(depths) < 0:
            raise ValueError(f'EfficientViT: depth_list {depths}: stages 1-2 need at least '
                             'their stride-2 MBConv (depth >= 1), no depth may be negative')
        if parsed['norm'] not in OFFICIAL_NORMS:
            raise ValueError(f"EfficientViT: norm {parsed['norm']!r} is not supported; choose "
                             f'one of {sorted(OFFICIAL_NORMS)}')
        if parsed['act_func'] not in OFFICIAL_ACTS:
            raise ValueError(f"EfficientViT: act_func {parsed['act_func']!r} is not one of "
                             f'{sorted(OFFICIAL_ACTS)}')
        return name, parsed

    def forward_stem(self, x: torch.Tensor) -> torch.Tensor:
        """The stride-2 stem map (official ``stage0``) of an image."""
        return self.stages[0].patch_embed.forward_stem(x)

    def imagenet_neck(self) -> dict:
        """The official ``ClsHead`` but its last linear layer
        (:class:`~vattn_mm.layers.EfficientViTClsNeck`), with the arch's
        ``head_width_list``."""
        widths = self.arch['head_width_list']
        if widths is None:
            raise ValueError('EfficientViT: this arch has no head_width_list (the ImageNet '
                             'classifier widths)')
        return dict(type='EfficientViTClsNeck', in_channels=self.out_channels[-1],
                    widths=list(widths), norm_cfg=self.norm_cfg, act_cfg=self.act_cfg,
                    ln_eps=B_SERIES_NORM_EPS)

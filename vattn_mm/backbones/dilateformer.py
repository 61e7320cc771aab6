"""DilateFormer: Multi-Scale Dilated Transformer for Visual Recognition
(Jiao et al., IEEE TMM 2023, arXiv:2302.01791).

The official code (JIAOJIAYUASD/dilateformer, ``models/dilateformer.py``) is
classification only; this is the first dense-prediction version.  Its outputs
are the features of each stage before that stage's downsampling (the output of
the stage's last block), optionally normalised for dense heads.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from ..layers.tokens import ConvDownsample, DilateStem
from .base import CheckArchs, PyramidBackbone
from .stage import StageSpec, drop_path_schedule
from .keymap import KeyMap
from .loading import FamilyConverter
from .registry import register_backbone

_MERGING_KERNELS = {'conv3_2': 3, 'conv2_2': 2}


@register_backbone
class DilateFormer(PyramidBackbone):
    """DilateFormer backbone: conv stem, stages of multi-scale dilated
    attention (MSDA) blocks then global attention blocks, each block with a
    depthwise-conv positional encoding; conv + BN downsampling between stages.

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'`` or a dict with the official
            names (``embed_dim``, ``depths``, ``num_heads`` and optionally
            ``kernel_size``, ``dilation``, ``mlp_ratio``, ``qkv_bias``,
            ``qk_scale``, ``dilate_attention``, ``downsamples``,
            ``merging_way``, ``patch_way``, ``cpe_per_block``,
            ``cpe_per_satge`` (sic)).  Stage ``i`` has ``embed_dim * 2**i``
            channels.
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks
            (official ``drop_path``).
        attn_drop_rate: dropout on attention weights (official ``attn_drop``).
        out_norm_cfg: norm applied to each output, e.g.
            ``dict(type='LN', eps=1e-6)`` for detection (dense-only weights:
            no classification checkpoint has them; they start at 1 / 0).
            ``None`` (default): raw block outputs, as the golden references.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.

    Outputs are the features of each stage before its downsampling (the
    official downsampling at the end of stage ``i`` is
    ``stages[i + 1].patch_embed`` here).  Any input size works: the stem and
    the ``'conv3_2'`` downsamplings halve with ceiling (100 -> 25 -> 13 -> 7
    -> 4), ``'conv2_2'`` ones with floor, as in the official code.
    """

    arch_zoo = {
        'tiny': dict(embed_dim=72, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24]),
        'small': dict(embed_dim=72, depths=[3, 5, 8, 3], num_heads=[3, 6, 12, 24]),
        'base': dict(embed_dim=96, depths=[4, 8, 10, 3], num_heads=[3, 6, 12, 24]),
    }
    arch_defaults = dict(
        kernel_size=3, dilation=[1, 2, 3], mlp_ratio=4., qkv_bias=True, qk_scale=None,
        dilate_attention=[True, True, False, False], downsamples=[True, True, True, False],
        merging_way='conv3_2', patch_way='overlaping', cpe_per_block=True,
        cpe_per_satge=False)
    arch_ignored = PyramidBackbone.arch_ignored | {
        'img_size', 'patch_size', 'in_chans', 'drop', 'attn_drop', 'drop_path'}
    per_stage_keys = ('depths', 'num_heads', 'dilate_attention', 'downsamples')
    check_archs = CheckArchs(
        micro=dict(embed_dim=12, depths=[1, 2, 1, 1], num_heads=[3, 6, 4, 8], mlp_ratio=2.),
        micro_size=(64, 96), representative='small')
    #: official keys (JIAOJIAYUASD/dilateformer ``models/dilateformer.py``): the
    #: stem ``patch_embed.proj.*`` is ``stages.0.patch_embed.convs.*``; the
    #: downsampling at the END of official stage ``i`` (conv + BN) is the patch
    #: embedding at the START of our stage ``i + 1``; the classifier's ``norm``
    #: and ``head`` are dropped; our output norms are dense-only
    converter = FamilyConverter(
        family='dilateformer',
        keymap=KeyMap((
            ('patch_embed.proj.', 'stages.0.patch_embed.convs.'),
            ('stages.{s-1}.downsample.proj.0.', 'stages.{s}.patch_embed.proj.'),
            ('stages.{s-1}.downsample.proj.1.', 'stages.{s}.patch_embed.norm.'),
            ('stages.{s-1}.downsample.pos_embed.', 'stages.{s}.patch_embed.pos_embed.'),
            ('.mlp.', '.ffn.'),
        )),
        classification_only=(r'^norm\.', r'^head\.'),
        dense_only=(r'^stages\.\d+\.norm\.', ),
    )
    official_wrapper = 'model'
    classifier_norm = 'norm.'
    norm_feeds_next = False

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'small',
                 in_channels: int = 3, drop_path_rate: float = 0.1,
                 attn_drop_rate: float = 0., out_norm_cfg: Optional[dict] = None,
                 **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        self._check_arch(a)
        dims = [a['embed_dim'] * 2 ** i for i in range(self.num_stages)]
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        specs = []
        for i, depth in enumerate(a['depths']):
            if i == 0:
                patch_embed = DilateStem(in_channels, dims[0])
            else:
                patch_embed = ConvDownsample(dims[i - 1], dims[i],
                                             _MERGING_KERNELS[a['merging_way']],
                                             cpe=a['cpe_per_satge'])
            specs.append(StageSpec(
                dims[i], depth, patch_embed, self._mixer(a, i, attn_drop_rate), dict(type='MLP'),
                a['mlp_ratio'], num_heads=a['num_heads'][i], drop_path=dpr[i],
                out_norm_cfg=out_norm_cfg,
                position=dict(type='ConvPosEnc') if a['cpe_per_block'] else None))
        self.build_stages(specs)

    @classmethod
    def imagenet_settings(cls, arch, official_sd=None) -> tuple[dict, dict]:
        """The ImageNet DilateFormer's final norm is LayerNorm(eps=1e-6)."""
        return {}, dict(out_norm_cfg=dict(type='LN', eps=1e-6))

    @staticmethod
    def _mixer(a: dict, i: int, attn_drop: float) -> dict:
        if a['dilate_attention'][i]:
            return dict(type='MultiScaleDilatedAttention', kernel_size=a['kernel_size'],
                        dilation=a['dilation'], qkv_bias=a['qkv_bias'],
                        qk_scale=a['qk_scale'], attn_drop=attn_drop)
        return dict(type='GlobalSelfAttention', qkv_bias=a['qkv_bias'],
                    qk_scale=a['qk_scale'], attn_drop=attn_drop)

    def _check_arch(self, a: dict) -> None:
        name = type(self).__name__
        if a['patch_way'] != 'overlaping':
            raise ValueError(f"{name}: only patch_way='overlaping' (the released stem) "
                             f"is supported, got {a['patch_way']!r}")
        if a['merging_way'] not in _MERGING_KERNELS:
            raise ValueError(f'{name}: merging_way must be one of {sorted(_MERGING_KERNELS)}, '
                             f"got {a['merging_way']!r}")
        expected = [True] * (self.num_stages - 1) + [False]
        if list(a['downsamples']) != expected:
            raise ValueError(f'{name}: a pyramid needs a downsampling after every stage but '
                             f"the last, i.e. downsamples={expected}; got {a['downsamples']}")
        if a['kernel_size'] % 2 == 0:
            raise ValueError(f"{name}: kernel_size must be odd, got {a['kernel_size']}")
        for i, heads in enumerate(a['num_heads']):
            dims = a['embed_dim'] * 2 ** i
            groups = len(a['dilation']) if a['dilate_attention'][i] else 1
            if dims % heads or heads % groups:
                raise ValueError(
                    f'{name}: stage {i} has {dims} channels and {heads} heads; channels '
                    f'must be divisible by heads' + (
                        f' and heads by the {groups} dilations {a["dilation"]}'
                        if groups > 1 else ''))

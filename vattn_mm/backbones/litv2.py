"""LITv2: Fast Vision Transformers with HiLo Attention
(Pan et al., NeurIPS 2022, arXiv:2205.13213)."""
from __future__ import annotations

from typing import Any, Mapping, Union

from ..layers import BiasedDeformConv2d, DeformableTokenMerging, OverlapPatchEmbed
from .base import CheckArchs, PyramidBackbone
from .stage import StageSpec, drop_path_schedule
from .keymap import KeyMap
from .loading import FamilyConverter
from .registry import register_backbone

_S = dict(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
          alpha=0.9, local_ws=[0, 0, 2, 1])
_LN = dict(type='LN', eps=1e-5)


@register_backbone
class LITv2(PyramidBackbone):
    """LITv2 backbone: a ``patch_size`` x ``patch_size`` patch embedding, early
    stages of attention-free ConvFFN blocks (``has_msa = 0``), later stages of
    HiLo attention blocks, and deformable token merging (DTM: DCNv1 2x2 /
    stride 2 + BatchNorm + GELU) between stages.

    Outputs are each stage's tokens before merging, passed through fresh
    LayerNorms (dense-only, not in the ImageNet checkpoints) except output 0,
    as in the official mmdet backbone; the normalised outputs do not feed the
    next stage.

    Args:
        arch: ``'s'``, ``'m'``, ``'b'`` or a dict with the official names
            (``embed_dim``, ``depths``, ``num_heads``, ``alpha``, ``local_ws``
            and optionally ``mlp_ratio`` (4), ``has_msa`` ([0, 0, 1, 1]),
            ``qkv_bias`` (True), ``patch_size`` (4)).  Stage ``i`` has
            ``embed_dim * 2**i`` channels.
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        norm_first_output: also normalise output 0, as the official mmseg
            backbone does (its mmdet backbone does not).
        merge_norm_cfg: norm of the token-merging layers (BN; SyncBN for
            multi-GPU training).
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.

    Sizes: the image is zero-padded right / bottom to a multiple of
    ``patch_size`` (side ``s`` -> ``ceil(s / 4)`` tokens), each merge floors
    (``floor(s / 2)``), and HiLo pads / crops internally, so any side of at
    least 29 px (4 stages) works, as in the official code.
    """

    arch_zoo = {
        's': _S,
        'm': dict(_S, depths=[2, 2, 18, 2]),
        'b': dict(_S, embed_dim=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32]),
    }
    arch_defaults = dict(mlp_ratio=4., has_msa=[0, 0, 1, 1], qkv_bias=True, patch_size=4)
    # official dense constructor keys without effect in the official code either
    arch_ignored = PyramidBackbone.arch_ignored | {
        'window_size', 'attn_drop_rate', 'pretrain_img_size'}
    per_stage_keys = ('num_heads', 'local_ws', 'has_msa')
    check_archs = CheckArchs(
        micro=dict(embed_dim=8, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], alpha=0.5,
                   local_ws=[0, 0, 2, 1], mlp_ratio=2.),
        representative='s')
    #: official keys (ziplab/LITv2 ``classification/models/litv2.py`` releases,
    #: dense ``detection/mmdet/models/backbones/litv2.py``): ``layers.{i}.downsample``
    #: (DTM at the END of stage ``i``) is our ``stages.{i+1}.patch_embed``
    converter = FamilyConverter(
        family='litv2',
        keymap=KeyMap((
            ('patch_embed.', 'stages.0.patch_embed.'),
            ('layers.{s}.downsample.norm_layer.', 'stages.{s+1}.patch_embed.norm.'),
            ('layers.{s}.downsample.', 'stages.{s+1}.patch_embed.'),
            ('layers.{s}.blocks.', 'stages.{s}.blocks.'),
            ('.mlp.dwconv.dwconv.', '.ffn.dwconv.'),
            ('.mlp.', '.ffn.'),
        )),
        classification_only=(r'^norm\.', r'^head\.'),   # the classifier's norm and head
        dense_only=(r'^stages\.\d+\.norm\.', ),          # official det: norm1..norm3
    )
    official_wrapper = 'model'
    classifier_norm = 'norm.'
    norm_feeds_next = False

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 's',
                 in_channels: int = 3, drop_path_rate: float = 0.2,
                 norm_first_output: bool = False,
                 merge_norm_cfg: dict = dict(type='BN'), **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        dims = [a['embed_dim'] * 2 ** i for i in range(self.num_stages)]
        self._check_heads(dims)
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        specs = []
        for i, depth in enumerate(a['depths']):
            if i == 0:
                patch_embed = OverlapPatchEmbed(in_channels, dims[0], a['patch_size'],
                                                a['patch_size'], padding=0, norm_cfg=_LN,
                                                pad_to_multiple=a['patch_size'])
            else:
                patch_embed = DeformableTokenMerging(dims[i - 1], dims[i],
                                                     norm_cfg=merge_norm_cfg)
            mixer = dict(type='HiLoAttention', window_size=a['local_ws'][i],
                         alpha=a['alpha'], qkv_bias=a['qkv_bias']) if a['has_msa'][i] else None
            specs.append(StageSpec(
                dims[i], depth, patch_embed, mixer, dict(type='ConvFFN'), a['mlp_ratio'],
                num_heads=a['num_heads'][i], drop_path=dpr[i], norm_cfg=_LN,
                out_norm_cfg=_LN if i or norm_first_output else None))
        self.build_stages(specs)

    def _check_heads(self, dims: list[int]) -> None:
        a = self.arch
        for i, dim in enumerate(dims):
            if not a['has_msa'][i]:
                continue
            if a['local_ws'][i] < 1:
                raise ValueError(f'LITv2: stage {i} has attention (has_msa=1) but '
                                 f'local_ws {a["local_ws"][i]}; use 1 (global) or more')
            if dim % a['num_heads'][i]:
                raise ValueError(f'LITv2: stage {i} has {dim} channels, not divisible '
                                 f'by num_heads {a["num_heads"][i]}')

    def smallest_input_side(self) -> int:
        """Smallest image side: every merge needs a map of at least 2x2."""
        return self.arch['patch_size'] * (2 ** (self.num_stages - 1) - 1) + 1

    def init_weights(self) -> None:
        super().init_weights()
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        if not any(isinstance(c, Mapping) and c.get('type') == 'Pretrained' for c in cfgs):
            # the generic conv init above must not leave random offsets
            for m in self.modules():
                if isinstance(m, BiasedDeformConv2d):
                    m.init_offset()

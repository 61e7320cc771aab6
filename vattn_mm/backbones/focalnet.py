"""FocalNet: Focal Modulation Networks (Yang et al., NeurIPS 2022,
arXiv:2203.11926), dense-prediction backbone."""
from __future__ import annotations

from typing import Any, Mapping, Union

from mmcv.cnn import build_norm_layer
from mmengine.registry import MODELS
from torch import nn

from ..checkpoint import FOCALNET_CONVERTER
from ..layers import MLP, FocalModulation, OverlapPatchEmbed, TokenBlock
from .base import PyramidBackbone, PyramidStage, drop_path_schedule

_T = dict(embed_dim=96, depths=[2, 2, 6, 2])
_S = dict(embed_dim=96, depths=[2, 2, 18, 2])
_B = dict(embed_dim=128, depths=[2, 2, 18, 2])
#: the dense (det / seg) focal windows of T/S/B: 9 instead of ImageNet's 3
_SRF = dict(focal_levels=[2] * 4, focal_windows=[9] * 4)
_LRF = dict(focal_levels=[3] * 4, focal_windows=[9] * 4)
#: FocalNet-L/XL/H (ImageNet-22k): conv stem, post-LN, layer scale; the
#: official dense version (FocalNet-DINO ``models/dino/focal.py``) keeps the
#: classification focal windows and stem padding 2.
_BIG = dict(use_conv_embed=True, use_postln=True, use_layerscale=True,
            conv_stem_padding=2)
_FL3 = dict(focal_levels=[3] * 4, focal_windows=[5] * 4)
_FL4 = dict(focal_levels=[4] * 4, focal_windows=[3] * 4)
_ISOTROPIC = ('tiny_iso', 'small_iso', 'base_iso')


@MODELS.register_module()
class FocalNet(PyramidBackbone):
    """FocalNet backbone: patch embeddings and focal-modulation blocks
    (hierarchical depthwise-conv contexts gated into a modulator instead of
    self-attention); outputs LayerNorm(stage tokens) of each stage.

    Args:
        arch: ``'tiny_srf'``, ``'tiny_lrf'``, ``'small_srf'``, ``'small_lrf'``,
            ``'base_srf'``, ``'base_lrf'`` (dense focal windows 9, as in the
            official detection / segmentation configs), ``'large_fl3'``,
            ``'large_fl4'``, ``'xlarge_fl3'``, ``'xlarge_fl4'``,
            ``'huge_fl3'``, ``'huge_fl4'`` or a dict with the official names
            (``embed_dim``, ``depths``, ``focal_levels``, ``focal_windows`` and
            optionally ``mlp_ratio``, ``focal_factor``, ``use_conv_embed``,
            ``use_layerscale``, ``layerscale_value``, ``use_postln``,
            ``use_postln_in_modulation``, ``normalize_modulator``,
            ``patch_size``, ``patch_norm``; plus ``conv_stem_padding``: the
            7x7 conv stem's padding, 3 in microsoft/FocalNet's detection code,
            2 in its classification code and in FocalNet-DINO).
            ``focal_levels`` / ``focal_windows`` may be one int for all stages.
            Loading an ImageNet checkpoint with smaller focal kernels
            zero-pads them (see :mod:`vattn_mm.checkpoint.focalnet`).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg: see
            :class:`PyramidBackbone`.

    The output norms (official dense ``norm0..norm3``, LayerNorm eps 1e-5)
    are dense-only: they normalise every returned map without feeding the
    next stage.  Each embedding zero-pads its input right / bottom to a
    multiple of its stride, so a side ``s`` gives ``ceil(s / 4)`` then
    ceil-halving per stage; any input size works.
    """

    arch_zoo = {
        'tiny_srf': dict(_T, **_SRF), 'tiny_lrf': dict(_T, **_LRF),
        'small_srf': dict(_S, **_SRF), 'small_lrf': dict(_S, **_LRF),
        'base_srf': dict(_B, **_SRF), 'base_lrf': dict(_B, **_LRF),
        'large_fl3': dict(_BIG, embed_dim=192, depths=[2, 2, 18, 2], **_FL3),
        'large_fl4': dict(_BIG, embed_dim=192, depths=[2, 2, 18, 2], **_FL4,
                          normalize_modulator=True),
        'xlarge_fl3': dict(_BIG, embed_dim=256, depths=[2, 2, 18, 2], **_FL3),
        'xlarge_fl4': dict(_BIG, embed_dim=256, depths=[2, 2, 18, 2], **_FL4),
        'huge_fl3': dict(_BIG, embed_dim=352, depths=[2, 2, 18, 2],
                         focal_levels=[3] * 4, focal_windows=[3] * 4,
                         use_postln_in_modulation=True),
        'huge_fl4': dict(_BIG, embed_dim=352, depths=[2, 2, 18, 2], **_FL4,
                         use_postln_in_modulation=True),
    }
    arch_defaults = dict(
        mlp_ratio=4.0, focal_factor=2, use_conv_embed=False, use_layerscale=False,
        layerscale_value=1e-4, use_postln=False, use_postln_in_modulation=False,
        normalize_modulator=False, patch_size=4, patch_norm=True, conv_stem_padding=3)
    arch_ignored = PyramidBackbone.arch_ignored | {'pretrain_img_size', 'img_size'}
    per_stage_keys = ('focal_levels', 'focal_windows')
    converter = FOCALNET_CONVERTER
    norm_feeds_next = False

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'tiny_srf',
                 in_channels: int = 3, drop_path_rate: float = 0.2, **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        dims = [a['embed_dim'] * 2 ** i for i in range(self.num_stages)]
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        norm_cfg = dict(type='LN', eps=1e-5)
        stages = []
        for i, depth in enumerate(a['depths']):
            blocks = [
                TokenBlock(
                    dims[i],
                    FocalModulation(
                        dims[i], a['focal_levels'][i], a['focal_windows'][i],
                        focal_factor=a['focal_factor'],
                        normalize_modulator=a['normalize_modulator'],
                        use_postln_in_modulation=a['use_postln_in_modulation']),
                    MLP(dims[i], int(dims[i] * a['mlp_ratio'])),
                    drop_path=dpr[i][j], norm_cfg=norm_cfg,
                    layer_scale=a['layerscale_value'] if a['use_layerscale'] else None,
                    post_norm=a['use_postln'])
                for j in range(depth)
            ]
            stages.append(PyramidStage(
                self._patch_embed(i, in_channels if i == 0 else dims[i - 1], dims[i]),
                blocks, build_norm_layer(norm_cfg, dims[i])[1]))
        self.stages = nn.ModuleList(stages)

    @classmethod
    def parse_arch(cls, arch: Union[str, Mapping[str, Any]]) -> tuple[str, dict]:
        if isinstance(arch, str) and arch.lower() in _ISOTROPIC:
            raise ValueError(
                f'FocalNet: {arch!r} is an isotropic FocalNet (one stage of stride-16 '
                'tokens), not a pyramid backbone; choose one of '
                f'{sorted(cls.arch_zoo)}')
        if isinstance(arch, Mapping):
            arch = dict(arch)
            stages = len(arch.get('depths', ()))
            for key in cls.per_stage_keys:
                if isinstance(arch.get(key), int):
                    arch[key] = [arch[key]] * stages
        name, parsed = super().parse_arch(arch)
        if len(parsed['depths']) < 2:
            raise ValueError(
                f"FocalNet: depths {parsed['depths']} has a single stage (an isotropic "
                'FocalNet), not a pyramid backbone')
        return name, parsed

    def _patch_embed(self, i: int, in_channels: int, embed_dims: int) -> nn.Module:
        """Stem (``i == 0``) or the downsampling that ends official stage
        ``i - 1``; pads to a multiple of its patch size like the official det
        code, then a non-overlapping patch conv or (``use_conv_embed``) a 7x7 s4
        stem / 3x3 s2 p1 downsampling conv."""
        a = self.arch
        patch = a['patch_size'] if i == 0 else 2
        if not a['use_conv_embed']:
            kernel, stride, padding = patch, patch, 0
        elif i == 0:
            kernel, stride, padding = 7, 4, a['conv_stem_padding']
        else:
            kernel, stride, padding = 3, 2, 1
        return OverlapPatchEmbed(
            in_channels, embed_dims, kernel, stride, padding,
            norm_cfg=dict(type='LN', eps=1e-5) if a['patch_norm'] else None,
            pad_to_multiple=patch)

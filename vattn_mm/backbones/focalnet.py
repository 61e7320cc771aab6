"""FocalNet: Focal Modulation Networks (Yang et al., NeurIPS 2022,
arXiv:2203.11926), dense-prediction backbone."""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence, Union

import torch.nn.functional as F
from torch import nn

from ..layers import OverlapPatchEmbed
from .base import CheckArchs, PyramidBackbone
from .stage import StageSpec, drop_path_schedule
from .keymap import KeyMap
from .loading import CheckpointError, FamilyConverter, StateDict
from .registry import register_backbone

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
#: focal window of the ImageNet FocalNet-T/S/B, widened to 9 by their dense arches
IMAGENET_FOCAL_WINDOW = 3

_FOCAL_KERNEL = re.compile(r'\.attn\.focal_layers\.\d+\.weight$')


def pad_focal_kernels(sd: StateDict, model_sd: StateDict, notes: list) -> StateDict:
    """Zero-pad focal kernels smaller than the model's at the centre."""
    padded, sizes = 0, set()  # sizes: ((kh, kw), (th, tw))
    out = dict(sd)
    for key, value in sd.items():
        target = model_sd.get(key)
        if target is None or not _FOCAL_KERNEL.search(key) or value.dim() != 4 \
                or value.shape[:2] != target.shape[:2]:
            continue
        (kh, kw), (th, tw) = value.shape[2:], target.shape[2:]
        grow_h, grow_w = th - kh, tw - kw
        if grow_h < 0 or grow_w < 0 or grow_h % 2 or grow_w % 2 or not (grow_h or grow_w):
            continue  # same size, or cannot be centred: left to the shape check
        out[key] = F.pad(value, (grow_w // 2, grow_w // 2, grow_h // 2, grow_h // 2))
        padded += 1
        sizes.add(((kh, kw), (th, tw)))
    if padded:
        listed = ', '.join(f'{a}x{b}->{c}x{d}' for (a, b), (c, d) in sorted(sizes))
        notes.append(
            f'FocalNet: zero-padded {padded} pretrained focal kernels at the centre to '
            f"the model's larger focal windows ({listed}), as the "
            'official FocalNet detection loader does; the padded convolutions compute '
            'exactly the pretrained features.')
    return out


_OFFICIAL_FOCAL_KERNEL = re.compile(r'\.modulation\.focal_layers\.\d+\.0\.weight$')


def crop_focal_kernels(sd: StateDict, official_shapes: Mapping[str, Sequence[int]],
                       notes: list) -> StateDict:
    """Inverse of :func:`pad_focal_kernels` on official keys: kernels larger
    than their recorded official shape are cropped at the centre when the
    border is all zeros (padded, never trained); otherwise they stay at the
    model's window size, as official dense checkpoints have them."""
    out, cropped, kept = dict(sd), 0, []
    for key, value in sd.items():
        shape = official_shapes.get(key)
        if shape is None or not _OFFICIAL_FOCAL_KERNEL.search(key) \
                or tuple(shape) == tuple(value.shape):
            continue
        top, left = (value.shape[2] - shape[2]) // 2, (value.shape[3] - shape[3]) // 2
        centre = value[:, :, top:top + shape[2], left:left + shape[3]]
        if tuple(centre.shape) == tuple(shape) \
                and value.count_nonzero() == centre.count_nonzero():
            out[key] = centre.contiguous()
            cropped += 1
        else:
            kept.append(key)
    if cropped:
        notes.append(f'FocalNet: cropped {cropped} zero-padded focal kernels back to the '
                     'released window size.')
    if kept:
        notes.append(f'FocalNet: kept {len(kept)} focal kernels at the model\'s window size '
                     f'(weights outside the released window), e.g. {kept[0]}.')
    return out




@register_backbone
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
            zero-pads them (see :func:`pad_focal_kernels`).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
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
    check_archs = CheckArchs(
        micro=dict(embed_dim=8, depths=[1, 1, 2, 1], mlp_ratio=2., focal_levels=[2, 2, 2, 2],
                   focal_windows=[3, 3, 3, 3]),
        representative='tiny_srf')
    #: official keys (microsoft/FocalNet ``classification/focalnet.py`` releases,
    #: ``detection/mmdet/models/backbones/focalnet.py``): ``layers.{i}.downsample``
    #: (end of official stage i) is ``stages.{i+1}.patch_embed``, ``modulation``
    #: ``attn``, ``gamma_1/2`` ``ls1/ls2.weight``, ``focal_layers.{l}.0``
    #: ``focal_layers.{l}``; dense checkpoints add the output norms ``norm0..3``.
    #: Smaller ImageNet focal kernels are zero-padded at the centre (as the
    #: official detection loader does; the features are unchanged) and cropped
    #: back when converting to the official layout.
    converter = FamilyConverter(
        family='focalnet',
        keymap=KeyMap((
            ('patch_embed.', 'stages.0.patch_embed.'),
            ('layers.{s}.downsample.', 'stages.{s+1}.patch_embed.'),
            ('layers.{s}.blocks.', 'stages.{s}.blocks.'),
            ('norm{s}.', 'stages.{s}.norm.'),
            ('.modulation.focal_layers.{l}.0.', '.attn.focal_layers.{l}.'),
            ('.modulation.', '.attn.'),
            ('.mlp.', '.ffn.'),
            ('.gamma_1', '.ls1.weight'),
            ('.gamma_2', '.ls2.weight'),
        )),
        classification_only=(r'^head\.', r'^norm\.'),
        dense_only=(r'^stages\.\d+\.norm\.', ),
        adapt=pad_focal_kernels,
        adapt_back=crop_focal_kernels,
    )
    official_wrapper = 'model'
    classifier_norm = 'norm.'
    norm_feeds_next = False

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'tiny_srf',
                 in_channels: int = 3, drop_path_rate: float = 0.2, **kwargs):
        super().__init__(arch, **kwargs)
        a = self.arch
        dims = [a['embed_dim'] * 2 ** i for i in range(self.num_stages)]
        dpr = drop_path_schedule(a['depths'], drop_path_rate)
        norm_cfg = dict(type='LN', eps=1e-5)
        self.build_stages([
            StageSpec(
                dims[i], depth,
                self._patch_embed(i, in_channels if i == 0 else dims[i - 1], dims[i]),
                mixer=dict(type='FocalModulation', focal_level=a['focal_levels'][i],
                           focal_window=a['focal_windows'][i], focal_factor=a['focal_factor'],
                           normalize_modulator=a['normalize_modulator'],
                           use_postln_in_modulation=a['use_postln_in_modulation']),
                ffn=dict(type='MLP'), mlp_ratio=a['mlp_ratio'], drop_path=dpr[i],
                norm_cfg=norm_cfg, out_norm_cfg=norm_cfg,
                layer_scale=a['layerscale_value'] if a['use_layerscale'] else None,
                post_norm=a['use_postln'])
            for i, depth in enumerate(a['depths'])])

    @classmethod
    def imagenet_settings(cls, arch, official_sd=None) -> tuple[dict, dict]:
        """The ImageNet FocalNet: the classification conv stem (padding 2) and
        its focal windows, read from ``official_sd`` (level-0 kernel of each
        stage) when given, else :data:`IMAGENET_FOCAL_WINDOW` for the dense
        T/S/B arches (the L/XL/H arches keep the ImageNet windows)."""
        if official_sd is not None:
            windows, stage = [], 0
            while f'layers.{stage}.blocks.0.modulation.focal_layers.0.0.weight' in official_sd:
                windows.append(official_sd[
                    f'layers.{stage}.blocks.0.modulation.focal_layers.0.0.weight'].shape[-1])
                stage += 1
            if not windows:
                raise CheckpointError('no FocalNet focal kernels (layers.0.blocks.0.modulation.'
                                      'focal_layers.0.0.weight) in the checkpoint')
            return dict(focal_windows=windows, conv_stem_padding=2), {}
        windows = cls.parse_arch(arch)[1]['focal_windows']
        if all(w == 9 for w in windows):
            windows = [IMAGENET_FOCAL_WINDOW] * len(windows)
        return dict(focal_windows=list(windows), conv_stem_padding=2), {}

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

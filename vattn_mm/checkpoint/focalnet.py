"""FocalNet (microsoft/FocalNet ``classification/focalnet.py`` released
checkpoints and ``detection/mmdet/models/backbones/focalnet.py``) key layout.

Official -> ours: ``patch_embed`` is stage 0's embedding, ``layers.{i}.
downsample`` (end of official stage i) becomes ``stages.{i+1}.patch_embed``,
``layers.{i}.blocks`` -> ``stages.{i}.blocks`` with ``modulation`` -> ``attn``,
``mlp`` -> ``ffn``, ``gamma_1/2`` -> ``ls1/ls2.weight`` and the depthwise
kernels ``focal_layers.{l}.0`` -> ``focal_layers.{l}``.  The dense output norms
``norm0..norm3`` (``stages.{i}.norm``) exist only in dense checkpoints; the
classifier's ``norm`` / ``head`` are dropped.

Dense models use larger focal windows than ImageNet (det/seg: 9 instead of 3);
:func:`pad_focal_kernels` zero-pads the smaller pretrained kernels at the
centre exactly as the official detection loader
(``detection/mmcv_custom/checkpoint.py``) does, which keeps the features
unchanged.  A checkpoint kernel larger than the model's is left alone and so
reported as a shape mismatch (the official loader crops it silently).
:func:`crop_focal_kernels` undoes the padding when converting back to the
official layout.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import torch.nn.functional as F

from .keymap import KeyMap
from .loading import FamilyConverter, StateDict

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


FOCALNET_CONVERTER = FamilyConverter(
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

"""P2T (yuhuan-wu/P2T ``p2t.py`` / ``detection/p2t.py``) official key layout.

Official keys: ``patch_embed{s+1}``, ``d_convs{s+1}.{p}`` (the stage's pooling
convs), ``block{s+1}.{j}`` with ``attn.q.0`` / ``attn.kv.0`` (a Linear inside a
Sequential), ``attn.proj``, ``attn.norm``, ``mlp.fc1`` / ``mlp.conv`` /
``mlp.fc2`` (``fc1``/``fc2`` are 1x1 convs with 4-D weights) and the
classifier ``head``; there are no stage output norms.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

from .keymap import KeyMap
from .loading import FamilyConverter, StateDict

P2T_RULES = (
    ('patch_embed{s+1}.', 'stages.{s}.patch_embed.'),
    ('d_convs{s+1}.', 'stages.{s}.pool_convs.'),
    ('block{s+1}.', 'stages.{s}.blocks.'),
    ('.attn.q.0.', '.attn.q.'),
    ('.attn.kv.0.', '.attn.kv.'),
    ('.mlp.conv.', '.ffn.dwconv.'),
    ('.mlp.', '.ffn.'),
)


def squeeze_pointwise_convs(sd: StateDict, model_sd: StateDict, notes: list) -> StateDict:
    """Turn 1x1-conv weights ``(out, in, 1, 1)`` into the ``(out, in)``
    weights of the equivalent ``nn.Linear`` where the model has a Linear."""
    out, count = {}, 0
    for key, value in sd.items():
        target = model_sd.get(key)
        if (target is not None and value.dim() == 4 and target.dim() == 2
                and value.shape[2:] == (1, 1) and value.shape[:2] == target.shape):
            value = value.flatten(1)
            count += 1
        out[key] = value
    if count:
        notes.append(f'Reshaped {count} 1x1-conv FFN weights (official IRB fc1/fc2) '
                     'to the equivalent linear weights.')
    return out


_POINTWISE_FFN = re.compile(r'\.mlp\.fc[12]\.weight$')


def unsqueeze_pointwise_convs(sd: StateDict, official_shapes: Mapping[str, Sequence[int]],
                              notes: list) -> StateDict:
    """Inverse of :func:`squeeze_pointwise_convs` on official keys: the IRB
    ``mlp.fc1`` / ``mlp.fc2`` weights become 1x1-conv weights again."""
    out, count = {}, 0
    for key, value in sd.items():
        if _POINTWISE_FFN.search(key) and value.dim() == 2:
            value = value[:, :, None, None]
            count += 1
        out[key] = value
    if count:
        notes.append(f'Reshaped {count} linear FFN weights to the official 1x1-conv '
                     'weights (IRB fc1/fc2).')
    return out


P2T_CONVERTER = FamilyConverter(
    family='p2t',
    keymap=KeyMap(P2T_RULES),
    classification_only=(r'^head\.', ),
    adapt=squeeze_pointwise_convs,
    adapt_back=unsqueeze_pointwise_convs,
)

"""Whole-checkpoint conversion between the official layouts and vattn-mm.

A family is a registered backbone class with a ``converter``
(:func:`~vattn_mm.backbones.released_families`); the class carries its
key map, how the released files wrap their state dict and the ImageNet
model's settings.

A vattn-mm backbone checkpoint written by :func:`convert_official_file` is
``{'state_dict': <our keys>, 'official_only': <official keys the backbone
does not use, e.g. head.*>, 'meta': {'vattn_mm': {...}}}``: every loader in
vattn-mm / OpenMMLab reads its ``state_dict``, and :func:`convert_to_official_file`
restores the released file exactly from it (same keys, equal tensors).
"""
from __future__ import annotations

import ast
import io
import os.path as osp
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ..backbones import (CheckpointError, CheckpointMismatchError, LoadReport, build_backbone,
                         extract_state_dict, read_checkpoint, released_families)
from ..backbones.loading import StateDict
from ..utils.atomic_io import atomic_write

Arch = Union[str, Mapping[str, Any]]


def get_family(family: str) -> type:
    """The backbone class of a family with official releases (case-insensitive)."""
    families = released_families()
    cls = families.get(family.lower())
    if cls is None:
        raise ValueError(f'unknown family {family!r}; choose one of {sorted(families)}')
    return cls


def parse_arch_arg(text: str) -> Arch:
    """A ``--arch`` value: a variant name, or a dict literal of official
    hyper-parameters (``"{'embed_dims': [32, 64, 160, 256], ...}"``)."""
    text = text.strip()
    if not text.startswith('{'):
        return text
    try:
        arch = ast.literal_eval(text)
    except (ValueError, SyntaxError) as err:
        raise ValueError(f'--arch {text!r} is neither a variant name nor a dict '
                         f'literal: {err}') from err
    if not isinstance(arch, dict):
        raise ValueError(f'--arch {text!r} is not a dict')
    return arch


def _describe(model: nn.Module) -> str:
    return f'{type(model).__name__} (arch {getattr(model, "arch_name", "?")})'


@dataclass
class OfficialConversion:
    """An official checkpoint converted for a backbone.

    Attributes:
        state_dict: the backbone weights under our keys.
        official_only: official keys the backbone does not use (classifier
            ``head``, final ``norm``), unchanged.
        official_shapes: original shape of every tensor the conversion
            re-shaped (official key -> shape), so it can be undone exactly.
        dense_only: backbone keys no ImageNet checkpoint has (they keep their
            initialisation when loaded).
        notes: what the conversion did to values.
    """

    state_dict: StateDict
    official_only: StateDict
    official_shapes: dict[str, list[int]]
    dense_only: list[str]
    notes: list[str]


def match_backbone(sd: Mapping[str, torch.Tensor], family: str, arch: Arch,
                   official: bool, **backbone_kwargs) -> tuple[StateDict, LoadReport]:
    """Convert ``sd`` for ``family`` / ``arch`` with the family's
    :meth:`FamilyConverter.match` and require a perfect fit.

    Args:
        official: whether ``sd`` must be in the official (True) or the
            vattn-mm (False) layout.

    Raises:
        CheckpointMismatchError: naming the missing / unexpected / mis-shaped
            keys when ``sd`` does not fit that backbone.
    """
    model = build_backbone(family, arch, device='meta', **backbone_kwargs)
    ours, report = type(model).checkpoint_converter().match(dict(sd), model.state_dict())
    if not report.ok or not report.loaded:
        raise CheckpointMismatchError(
            f'the checkpoint does not fit {_describe(model)} (read as '
            f'{report.source_format} checkpoint): {report.describe_problems()}. '
            'Check --family and --arch.')
    if report.source_format.startswith('official') != official:
        raise CheckpointError(
            f'the checkpoint holds {report.source_format} keys for {_describe(model)}, '
            f'expected {"official" if official else "vattn-mm"} keys')
    return ours, report


def official_to_vattn(sd: Mapping[str, torch.Tensor], family: str, arch: Arch,
                      **backbone_kwargs) -> OfficialConversion:
    """Convert an official state dict for ``family`` / ``arch`` (see
    :func:`match_backbone` for the errors)."""
    ours, report = match_backbone(sd, family, arch, True, **backbone_kwargs)
    to_official = get_family(family).converter.official_key
    shapes = {to_official(k): list(sd[to_official(k)].shape) for k in report.loaded
              if to_official(k) in sd and sd[to_official(k)].shape != ours[k].shape}
    return OfficialConversion(
        state_dict={k: ours[k] for k in report.loaded},
        official_only={k: sd[k] for k in report.dropped},
        official_shapes=shapes, dense_only=report.dense_only, notes=report.notes)


def vattn_to_official(sd: Mapping[str, torch.Tensor], family: str,
                      official_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                      official_only: Optional[Mapping[str, torch.Tensor]] = None,
                      drop_dense_only: bool = False) -> tuple[StateDict, list[str]]:
    """Our backbone state dict -> official keys (plus ``official_only``).

    Returns the official state dict and notes on what changed.
    """
    converter = get_family(family).converter
    foreign = [k for k in sd if not k.startswith('stages.')]
    if foreign:
        raise CheckpointError(
            f'not a vattn-mm backbone state dict: keys {foreign[:5]} do not start with '
            "'stages.' (an official checkpoint needs no conversion to official)")
    notes: list[str] = []
    dense = [k for k in sd if any(re.search(p, k) for p in converter.dense_only)]
    if drop_dense_only and dense:
        sd = {k: v for k, v in sd.items() if k not in dense}
        notes.append(f'Dropped {len(dense)} dense-only tensors (no official ImageNet '
                     f'counterpart): {", ".join(dense[:8])}{" ..." if len(dense) > 8 else ""}')
    elif dense:
        notes.append(f'Kept {len(dense)} dense-only tensors that official ImageNet code '
                     f'does not have (use --drop-dense-only to drop them): '
                     f'{", ".join(dense[:8])}{" ..." if len(dense) > 8 else ""}')
    official = converter.ours_to_official(sd, official_shapes, notes)
    clash = sorted(official.keys() & (official_only or {}).keys())
    if clash:
        raise CheckpointError(f'official-only keys clash with converted keys: {clash[:5]}')
    official.update(official_only or {})
    return official, notes


# ------------------------------------------------------------------ files
def check_output(path: str, source: Optional[str] = None, overwrite: bool = False) -> None:
    """Never overwrite ``source``; an existing ``path`` only with ``overwrite``."""
    if source is not None and osp.exists(source) and osp.exists(path) \
            and osp.samefile(source, path):
        raise FileExistsError(f'refusing to overwrite the input file {source!r}')
    if osp.exists(path) and not overwrite:
        raise FileExistsError(f'{path!r} exists; choose another output or pass --overwrite')


def save_checkpoint(obj: Any, path: str, source: Optional[str] = None,
                    overwrite: bool = False) -> str:
    """``torch.save`` to ``path`` atomically (a crash leaves no partial file)."""
    check_output(path, source, overwrite)
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write(path, buffer.getvalue())
    return osp.abspath(path)


def save_text(text: str, path: str, source: Optional[str] = None,
              overwrite: bool = False) -> str:
    """Write ``text`` to ``path`` atomically."""
    check_output(path, source, overwrite)
    atomic_write(path, text.encode())
    return osp.abspath(path)


def _official_wrapper(obj: Mapping) -> Optional[str]:
    for wrapper in ('state_dict', 'model'):
        if isinstance(obj.get(wrapper), Mapping):
            return wrapper
    return None


def official_state_dict(obj: Mapping, family: str) -> StateDict:
    """The state dict of a released file of ``family``, all of it: for a
    family whose official backbone keys carry a prefix (EfficientViT's
    ``backbone.``) the classifier keys beside it (``head.*``) are kept too."""
    keep_all = bool(get_family(family).converter.official_prefix)
    return extract_state_dict(obj, prefix='' if keep_all else None)


def convert_official_file(src: str, out: str, family: str, arch: Arch,
                          overwrite: bool = False) -> OfficialConversion:
    """Official released checkpoint ``src`` -> vattn-mm backbone checkpoint ``out``."""
    obj = read_checkpoint(src)
    conv = official_to_vattn(official_state_dict(obj, family), family, arch)
    meta = dict(family=family.lower(), arch=arch, converted_from=osp.basename(src),
                official_wrapper=_official_wrapper(obj), official_shapes=conv.official_shapes)
    save_checkpoint({'state_dict': conv.state_dict, 'official_only': conv.official_only,
                     'meta': {'vattn_mm': meta}}, out, src, overwrite)
    return conv


def convert_to_official_file(src: str, out: str, family: Optional[str] = None,
                             arch: Optional[Arch] = None, drop_dense_only: bool = False,
                             overwrite: bool = False) -> list[str]:
    """vattn-mm checkpoint ``src`` (backbone file, or whole detector /
    segmentor / classifier with ``backbone.*``) -> official layout ``out``.

    ``family`` defaults to the one recorded by :func:`convert_official_file`;
    with ``arch`` the weights are first checked against that backbone.
    Returns notes on what changed.
    """
    obj = read_checkpoint(src)
    meta = obj.get('meta') if isinstance(obj.get('meta'), Mapping) else {}
    meta = meta.get('vattn_mm') if isinstance(meta.get('vattn_mm'), Mapping) else {}
    if family is None:
        family = meta.get('family')
        if family is None:
            raise ValueError(f'{src!r} does not record its family; pass --family')
    elif meta.get('family') not in (None, family.lower()):
        raise ValueError(f'{src!r} was converted from a {meta["family"]} checkpoint, '
                         f'not {family}')
    sd = extract_state_dict(obj)
    if arch is not None:
        match_backbone(sd, family, arch, official=False)
    official, notes = vattn_to_official(sd, family, meta.get('official_shapes'),
                                        obj.get('official_only'), drop_dense_only)
    wrapper = meta.get('official_wrapper', get_family(family).official_wrapper)
    save_checkpoint(official if wrapper is None else {wrapper: official}, out, src, overwrite)
    return notes

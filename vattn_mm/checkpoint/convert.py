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

A released detection / segmentation checkpoint (mmdet 2.x / mmseg 0.x, the
backbone under ``backbone.`` in official names) converts for a config's model
with :func:`convert_dense_checkpoint` / :func:`convert_dense_file`, checked
key by key against that model.
"""
from __future__ import annotations

import ast
import io
import os.path as osp
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ..backbones import (CheckpointError, CheckpointMismatchError, LoadReport, backbone_class,
                         build_backbone, extract_state_dict, read_checkpoint)
from ..backbones.keymap import KeyMap
from ..backbones.loading import StateDict, checkpoint_wrapper
from ..utils.atomic_io import atomic_write
from ..utils.download import is_url

Arch = Union[str, Mapping[str, Any]]


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
    to_official = backbone_class(family, released=True).converter.official_key
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
    converter = backbone_class(family, released=True).converter
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


def official_state_dict(obj: Mapping, family: str) -> StateDict:
    """The state dict of a released file of ``family``, all of it: for a
    family whose official backbone keys carry a prefix (EfficientViT's
    ``backbone.``) the classifier keys beside it (``head.*``) are kept too."""
    keep_all = bool(backbone_class(family, released=True).converter.official_prefix)
    return extract_state_dict(obj, prefix='' if keep_all else None)


def source_name(src: str) -> str:
    """The file name of a checkpoint path or URL (without query or fragment)."""
    return osp.basename(urllib.parse.urlsplit(src).path if is_url(src) else src)


def convert_official_file(src: str, out: str, family: str, arch: Arch,
                          overwrite: bool = False) -> OfficialConversion:
    """Official released checkpoint ``src`` -> vattn-mm backbone checkpoint ``out``."""
    obj = read_checkpoint(src)
    conv = official_to_vattn(official_state_dict(obj, family), family, arch)
    meta = dict(family=family.lower(), arch=arch, converted_from=source_name(src),
                official_wrapper=checkpoint_wrapper(obj), official_shapes=conv.official_shapes)
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
    wrapper = meta.get('official_wrapper',
                       backbone_class(family, released=True).official_wrapper)
    save_checkpoint(official if wrapper is None else {wrapper: official}, out, src, overwrite)
    return notes


# ------------------------------------------------------------ dense checkpoints
#: Official dense names of backbone tensors the ImageNet key maps do not know:
#: ziplab/LITv2's mmdet / mmseg backbones keep their output norms as
#: ``norm{i}`` (the classifier's final norm is ``norm``).
DENSE_KEYMAPS = {'litv2': KeyMap((('norm{s}.', 'stages.{s}.norm.'), ))}

#: ``meta`` entries of mmdet 2.x / mmseg 0.x checkpoints kept as a record
_SOURCE_VERSIONS = ('mmdet_version', 'mmseg_version', 'mmcv_version', 'mmengine_version')


@dataclass
class DenseConversion:
    """A whole detector / segmentor checkpoint converted for a config.

    Attributes:
        state_dict: every tensor of the config's model, under its keys.
        meta: the mmengine checkpoint ``meta`` (``dataset_meta`` from the
            source's ``CLASSES`` / ``PALETTE``, and a ``vattn_mm`` record).
        family: the backbone family.
        source_format: how the backbone keys were read (``'official pvtv2'``
            or ``'vattn-mm'``).
        notes: what the conversion did besides renaming.
    """

    state_dict: StateDict
    meta: dict
    family: str
    source_format: str
    notes: list[str]


def build_config_model(config: Any) -> tuple[Any, nn.Module]:
    """``(cfg, model)``: the model of ``config`` (a path or an mmengine
    ``Config``) built on the meta device, in the config's default scope."""
    from mmengine.config import Config
    from mmengine.registry import MODELS, DefaultScope
    cfg = config if isinstance(config, Config) else Config.fromfile(config)
    if 'model' not in cfg:
        raise ValueError(f'config {getattr(cfg, "filename", config)!r} has no model')
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope')), torch.device('meta'):
        return cfg, MODELS.build(cfg.model)


def _backbone_converter(model: nn.Module, config_name: str):
    backbone = getattr(model, 'backbone', None)
    cls = type(backbone)
    if backbone is None or not hasattr(cls, 'checkpoint_converter'):
        raise ValueError(f'the model of {config_name} ({type(model).__name__}) has no vattn-mm '
                         f'backbone (found {cls.__name__ if backbone is not None else "none"})')
    return cls.family(), cls.checkpoint_converter(), backbone


def _dataset_meta(meta: Mapping) -> Optional[dict]:
    """mmengine's ``dataset_meta`` from a 2.x / 0.x ``meta`` (``CLASSES``,
    ``PALETTE``) or a 3.x / 1.x one (``dataset_meta``)."""
    if isinstance(meta.get('dataset_meta'), Mapping):
        return dict(meta['dataset_meta'])
    out = {}
    classes = meta.get('CLASSES')
    if classes is not None:
        out['classes'] = (classes, ) if isinstance(classes, str) else tuple(classes)
    if meta.get('PALETTE') is not None:
        out['palette'] = [tuple(c) for c in meta['PALETTE']]
    return out or None


def convert_dense_state_dict(obj: Mapping, config: Any, source: str = '<state dict>'
                             ) -> DenseConversion:
    """:func:`convert_dense_checkpoint` on a loaded checkpoint ``obj``."""
    cfg, model = build_config_model(config)
    config_name = getattr(cfg, 'filename', None) or str(config)
    family, converter, backbone = _backbone_converter(model, config_name)
    sd = extract_state_dict(obj, prefix='')
    backbone_sd = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    if not backbone_sd:
        raise CheckpointError(
            f'{source!r} has no backbone.* keys: not a detector / segmentor checkpoint (an '
            'ImageNet backbone release loads through the backbone\'s init_cfg, or converts '
            'with --family / --arch)')
    dense_keymap = DENSE_KEYMAPS.get(family)
    if dense_keymap is not None:
        backbone_sd = {dense_keymap.to_ours(k): v for k, v in backbone_sd.items()}
    ours, report = converter.match(backbone_sd, backbone.state_dict())
    report.missing += report.dense_only    # a dense checkpoint has every dense tensor
    if not report.ok:
        raise CheckpointMismatchError(
            f'the backbone of {source!r} (read as {report.source_format} keys) does not fit '
            f'{_describe(backbone)} of {config_name}: {report.describe_problems()}. Is it a '
            'checkpoint of this config\'s backbone family and variant?')
    notes = list(report.notes)
    if report.dropped:
        notes.append(f'Dropped {len(report.dropped)} classification-only backbone tensors: '
                     f'{", ".join(report.dropped[:8])}{" ..." if len(report.dropped) > 8 else ""}')
    converted = {'backbone.' + k: ours[k] for k in report.loaded}
    converted.update((k, v) for k, v in sd.items() if not k.startswith('backbone.'))
    fit = LoadReport.compare(converted, model.state_dict(), 'whole-model')
    if not fit.ok:
        raise CheckpointMismatchError(
            f'{source!r} does not fit the model of {config_name} ({type(model).__name__}) '
            f'outside the backbone: {fit.describe_problems()}. Is it a checkpoint of this '
            'config\'s task, heads and number of classes?')
    src_meta = obj.get('meta') if isinstance(obj.get('meta'), Mapping) else {}
    record = dict(config=osp.basename(config_name), family=family,
                  source_format=report.source_format,
                  converted_from=source_name(source),
                  **{k: str(src_meta[k]) for k in _SOURCE_VERSIONS if k in src_meta})
    meta = {'vattn_mm': record}
    dataset_meta = _dataset_meta(src_meta)
    if dataset_meta is not None:
        meta['dataset_meta'] = dataset_meta
    return DenseConversion({k: converted[k] for k in model.state_dict()}, meta, family,
                           report.source_format, notes)


def convert_dense_checkpoint(src: str, config: Any) -> DenseConversion:
    """An official detection / segmentation checkpoint ``src`` (file or URL;
    mmdet 2.x / mmseg 0.x or 3.x / 1.x layout, backbone under ``backbone.``
    in the official or vattn-mm key names) for the model of ``config``.

    The backbone goes through its family's converter (renaming, P2T's 1x1
    convs, FocalNet's kernel padding, ...). Necks and heads keep their keys:
    RetinaNet, RPN, the Mask R-CNN RoI heads, FPN, UPerHead and FPNHead name
    their tensors the same in mmdet 2.28 / mmseg 0.30 as in mmdet 3.3 /
    mmseg 1.2. ``meta['CLASSES']`` / ``['PALETTE']`` become ``dataset_meta``.

    Raises:
        CheckpointError: ``src`` is unreadable or holds no ``backbone.*`` keys.
        CheckpointMismatchError: naming the missing / unexpected / mis-shaped
            keys when the result would not load strictly into the model.
    """
    return convert_dense_state_dict(read_checkpoint(src), config, src)


def convert_dense_file(src: str, out: str, config: Any,
                       overwrite: bool = False) -> DenseConversion:
    """:func:`convert_dense_checkpoint`, written to ``out`` as an mmengine
    checkpoint ``{'meta': ..., 'state_dict': ...}`` (atomically; nothing is
    written when the conversion fails) that ``tools/test.py CONFIG OUT`` loads."""
    local_src = None if is_url(src) else src
    check_output(out, local_src, overwrite)
    conv = convert_dense_checkpoint(src, config)
    save_checkpoint({'meta': conv.meta, 'state_dict': conv.state_dict}, out, local_src,
                    overwrite)
    return conv


def official_dense_state_dict(sd: Mapping[str, torch.Tensor], family: str) -> StateDict:
    """A whole vattn-mm detector / segmentor state dict in the official dense
    layout: backbone tensors under the family's official names (dense-only
    output norms under the official dense names where the official code has
    them), every other key unchanged (as mmdet 2.x / mmseg 0.x name them)."""
    backbone = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    if not backbone:
        raise CheckpointError('no backbone.* keys: not a detector / segmentor state dict')
    official, _ = vattn_to_official(backbone, family)
    dense_keymap = DENSE_KEYMAPS.get(family)
    if dense_keymap is not None:
        official = {dense_keymap.to_official(k): v for k, v in official.items()}
    out = {'backbone.' + k: v for k, v in official.items()}
    out.update((k, v) for k, v in sd.items() if not k.startswith('backbone.'))
    return out

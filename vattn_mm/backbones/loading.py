"""Reading checkpoints safely and loading them into a backbone strictly.

Official releases come raw, as ``{'model': sd}`` or as ``{'state_dict': sd}``;
vattn-mm / OpenMMLab checkpoints hold the backbone under ``backbone.``.  Every
form is accepted, converted with the family's :class:`FamilyConverter` and then
checked key by key: a checkpoint that does not fit raises
:class:`CheckpointMismatchError` instead of silently leaving weights random.
"""
from __future__ import annotations

import pickle
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

import torch
from torch import nn

from ..utils.download import CheckpointDownloadError
from ..utils.log import log
from ..utils.safe_load import UnreadableCheckpointError, load_checkpoint_file
from .keymap import KeyMap

StateDict = dict[str, torch.Tensor]
_WRAPPERS = ('state_dict', 'model', 'module')
_MAX_LISTED = 12


class CheckpointError(RuntimeError):
    """A checkpoint file cannot be read or holds no usable state dict."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint does not fit the model it is loaded into."""


def read_checkpoint(path: str) -> dict:
    """Load ``path`` (a file or an ``http(s)://`` URL, downloaded once into
    the torch hub cache) on the CPU with ``weights_only=True`` (the allow-list
    of :mod:`vattn_mm.utils.safe_load` covers OpenMMLab files; anything else
    only loads for a file trusted explicitly)."""
    try:
        obj = load_checkpoint_file(path)
    except (pickle.UnpicklingError, UnreadableCheckpointError, CheckpointDownloadError) as err:
        raise CheckpointError(str(err)) from err
    if not isinstance(obj, Mapping):
        raise CheckpointError(
            f'{path!r} holds a {type(obj).__name__}, not a state dict')
    return dict(obj)


def checkpoint_wrapper(obj: Mapping) -> Optional[str]:
    """The key under which a checkpoint file holds its state dict
    (``state_dict``, ``model`` or ``module``, the first present), or None
    for a bare state dict."""
    return next((w for w in _WRAPPERS if isinstance(obj.get(w), Mapping)), None)


def extract_state_dict(obj: Mapping, prefix: Optional[str] = None) -> StateDict:
    """Unwrap the :func:`checkpoint_wrapper` container, strip the DDP
    ``module.`` prefix and select ``prefix`` (``'backbone.'`` is taken
    automatically from whole-detector / segmentor / classifier files)."""
    wrapper = checkpoint_wrapper(obj)
    if wrapper is not None:
        obj = obj[wrapper]
    sd = {k[len('module.'):] if k.startswith('module.') else k: v
          for k, v in obj.items()}
    if prefix is None and any(k.startswith('backbone.') for k in sd):
        prefix = 'backbone.'
    if prefix:
        sd = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
        if not sd:
            raise CheckpointError(f'no key starts with prefix {prefix!r}')
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad or not sd:
        raise CheckpointError(
            'checkpoint holds no state dict of tensors'
            + (f' (non-tensor entries: {bad[:_MAX_LISTED]})' if bad else ''))
    return sd


def _listing(keys: Sequence[str]) -> str:
    keys = list(keys)
    more = f' ... (+{len(keys) - _MAX_LISTED} more)' if len(keys) > _MAX_LISTED else ''
    return ', '.join(keys[:_MAX_LISTED]) + more


@dataclass
class LoadReport:
    """What a checkpoint brought to a model, key by key."""

    source_format: str
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    dense_only: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def compare(cls, sd: Mapping[str, torch.Tensor], model_sd: Mapping[str, torch.Tensor],
                source_format: str, dense_only: Callable[[str], bool] = lambda key: False
                ) -> 'LoadReport':
        """The fit of ``sd`` to ``model_sd`` key by key and shape by shape
        (what a strict load checks); a model key absent from ``sd`` is
        ``dense_only`` where the predicate says so, else ``missing``."""
        report = cls(source_format)
        for key, target in model_sd.items():
            if key not in sd:
                (report.dense_only if dense_only(key) else report.missing).append(key)
            elif tuple(sd[key].shape) != tuple(target.shape):
                report.mismatched.append(f'{key} (checkpoint {tuple(sd[key].shape)} vs model '
                                         f'{tuple(target.shape)})')
            else:
                report.loaded.append(key)
        report.unexpected = [k for k in sd if k not in model_sd]
        return report

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def describe_problems(self) -> str:
        parts = []
        if self.missing:
            parts.append(f'missing keys ({len(self.missing)}): {_listing(self.missing)}')
        if self.unexpected:
            parts.append(f'unexpected keys ({len(self.unexpected)}): '
                         f'{_listing(self.unexpected)}')
        if self.mismatched:
            parts.append(f'mis-shaped keys ({len(self.mismatched)}): '
                         f'{_listing(self.mismatched)}')
        return '; '.join(parts)


Adapter = Callable[[StateDict, StateDict, list], StateDict]
#: ``fn(official_sd, official_shapes, notes) -> official_sd``
BackAdapter = Callable[[StateDict, Mapping[str, Sequence[int]], list], StateDict]


@dataclass
class FamilyConverter:
    """How one backbone family's official checkpoints map onto our modules.

    Args:
        family: family name (``'pvtv2'``, ...).
        keymap: official <-> ours key renaming.
        classification_only: regexes of official keys the dense backbone
            drops (classifier head, final norm).
        dense_only: regexes of our keys no classification checkpoint has
            (e.g. output norms); they keep their initialisation.
        adapt: optional ``fn(sd, model_sd, notes) -> sd`` that changes values
            to fit the model (e.g. zero-padding focal kernels), appending a
            sentence to ``notes`` for everything it did.
        adapt_back: optional inverse of ``adapt`` for :meth:`ours_to_official`:
            ``fn(official_sd, official_shapes, notes) -> official_sd`` gives
            changed values back their official form (``official_shapes``:
            the original shapes of tensors ``adapt`` re-shaped, if known).
        official_prefix: prefix of the backbone keys in the released files
            (EfficientViT: ``'backbone.'``, beside the classifier's
            ``head.*``); stripped before renaming where present (loaders
            may have stripped it already) and added back by
            :meth:`ours_to_official`.
    """

    family: str
    keymap: KeyMap
    classification_only: Sequence[str] = ()
    dense_only: Sequence[str] = ()
    adapt: Optional[Adapter] = None
    adapt_back: Optional[BackAdapter] = None
    official_prefix: str = ''

    def _matches(self, patterns: Sequence[str], key: str) -> bool:
        return any(re.search(p, key) for p in patterns)

    def official_to_ours(self, sd: Mapping[str, torch.Tensor]) -> StateDict:
        """Rename an official state dict, dropping classification-only keys."""
        cut = len(self.official_prefix)
        return {self.keymap.to_ours(k[cut:] if cut and k.startswith(self.official_prefix)
                                    else k): v
                for k, v in sd.items() if not self._matches(self.classification_only, k)}

    def official_key(self, key: str) -> str:
        """The official key of one of our keys."""
        return self.official_prefix + self.keymap.to_official(key)

    def ours_to_official(self, sd: Mapping[str, torch.Tensor],
                         official_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                         notes: Optional[list] = None) -> StateDict:
        """Rename our state dict to official keys and undo ``adapt``."""
        out = {self.official_key(k): v for k, v in sd.items()}
        if self.adapt_back is not None:
            out = self.adapt_back(out, official_shapes or {}, [] if notes is None else notes)
        return out

    def match(self, sd: StateDict, model_sd: StateDict) -> tuple[StateDict, LoadReport]:
        """Convert ``sd`` (official or ours) for a model and report the fit."""
        as_official = self.official_to_ours(sd)
        official = len(as_official.keys() & model_sd.keys()) > len(sd.keys() & model_sd.keys())
        dropped = [k for k in sd if self._matches(self.classification_only, k)] if official else []
        notes: list[str] = []
        if official:
            sd = as_official
        if self.adapt is not None:
            sd = self.adapt(sd, model_sd, notes)
        report = LoadReport.compare(sd, model_sd,
                                    f'official {self.family}' if official else 'vattn-mm',
                                    lambda key: self._matches(self.dense_only, key))
        report.dropped, report.notes = dropped, notes
        return sd, report


def load_matched(model: nn.Module, weights: StateDict, report: LoadReport, source: str,
                 what: str, fix: str) -> None:
    """Load the tensors of ``weights`` that ``report`` matched into ``model``,
    or raise a :class:`CheckpointMismatchError` saying that ``source`` does
    not fit ``what``, naming the misfit keys, then ``fix``."""
    if not report.ok:
        raise CheckpointMismatchError(
            f'{source!r} does not fit {what}: {report.describe_problems()}. {fix}')
    model.load_state_dict({k: weights[k] for k in report.loaded}, strict=False)


def load_pretrained(model: nn.Module, path: str, converter: FamilyConverter,
                    prefix: Optional[str] = None, verbose: bool = False) -> LoadReport:
    """Load ``path`` into ``model`` with every backbone weight matched;
    ``verbose``: log what was loaded, dropped and kept (:func:`~vattn_mm.utils.log.log`).

    Raises:
        CheckpointMismatchError: naming the missing / unexpected / mis-shaped
            keys when the checkpoint does not fit.
    """
    sd = extract_state_dict(read_checkpoint(path), prefix)
    model_sd = model.state_dict()
    sd, report = converter.match(sd, model_sd)
    load_matched(model, sd, report, path,
                 f'{type(model).__name__} ({getattr(model, "arch_name", "custom arch")}; read as '
                 f'{report.source_format} checkpoint)', 'Check the arch and the checkpoint file.')
    if verbose:
        log(f'Loaded {len(report.loaded)} tensors from {path} '
            f'({report.source_format} format) into {type(model).__name__}.'
            + (f' Ignored classification-only keys: {_listing(report.dropped)}.'
               if report.dropped else '')
            + (f' Dense-only keys keep their initialisation: '
               f'{_listing(report.dense_only)}.' if report.dense_only else ''))
        for note in report.notes:
            log(note)
    return report

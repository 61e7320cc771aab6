"""Discrete top-k selections (QuadTree attention's key selection) that can be
recorded or pinned, to check an exported graph whose selection may flip
between near-equal scores (``docs/deployment.md``).

Layers select through :func:`top_k`.  Off (the default) it is
``scores.topk(k, dim=-1)`` behind one module-level ``None`` check: no extra
work in training or inference, and nothing for ``torch.compile`` to break on.

* :class:`record_selections`: every selection's indices, in call order (in
  eager mode, or while tracing for ONNX: the traced indices, which the
  exporter can return as extra graph outputs).
* :class:`pin_selections`: every selection, in the same order, uses given
  indices (for example onnxruntime's) instead of its own; per selection it
  records how many rows kept another key set than the scores' own top-k and
  by how much the kept keys fall short of the own k-th best score.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

#: the active recorder / pinner (one at a time); None: plain ``topk``
_ACTIVE: Optional['_SelectionContext'] = None


def selecting() -> bool:
    """True inside :class:`record_selections` or :class:`pin_selections`."""
    return _ACTIVE is not None


def top_k(scores: torch.Tensor, k) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, indices)`` of the ``k`` largest ``scores`` along the last
    dimension, as ``scores.topk(k, dim=-1)`` unless a context records or
    pins the selections."""
    if _ACTIVE is None:
        return scores.topk(k, dim=-1)
    return _ACTIVE.select(scores, k)


class _SelectionContext:
    """Installs itself as the active selection context (not re-entrant)."""

    def __enter__(self):
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError('a selection is already being recorded or pinned')
        _ACTIVE = self
        return self

    def __exit__(self, *exc):
        global _ACTIVE
        _ACTIVE = None

    def select(self, scores: torch.Tensor, k) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class record_selections(_SelectionContext):
    """Collect every selection's indices in call order (``.indices``)."""

    def __init__(self):
        self.indices: list[torch.Tensor] = []

    def select(self, scores, k):
        values, indices = scores.topk(k, dim=-1)
        self.indices.append(indices)
        return values, indices


@dataclass
class PinnedSelection:
    """One pinned selection against the scores' own top-k.

    ``rows``: selections made (queries); ``differing``: rows whose pinned key
    set is not the own top-k set; ``max_gap``: largest (own k-th best score -
    lowest pinned score) / the row's largest absolute score, over all rows
    (0 where the sets agree; ``inf`` for a pinned index out of range or
    repeated in its row)."""

    shape: tuple
    rows: int
    differing: int
    max_gap: float


@dataclass
class pin_selections(_SelectionContext):
    """Make the ``i``-th selection use ``indices[i]`` (same shape as its own
    top-k indices) and record a :class:`PinnedSelection` for each in
    ``.checks``.  Raises ``ValueError`` on a shape mismatch and, on exit,
    when not every given selection was used."""

    indices: Sequence[torch.Tensor]
    checks: list[PinnedSelection] = field(default_factory=list)

    def select(self, scores, k):
        position = len(self.checks)
        if position >= len(self.indices):
            raise ValueError(f'selection {position}: only {len(self.indices)} pinned '
                             'selections were given')
        own_values, own = scores.topk(k, dim=-1)
        pinned = self.indices[position].to(scores.device, torch.long)
        if pinned.shape != own.shape:
            raise ValueError(f'selection {position}: pinned indices of shape '
                             f'{tuple(pinned.shape)}, the top-{k} here has {tuple(own.shape)}')
        ordered = pinned.sort(dim=-1).values
        valid = ((ordered >= 0) & (ordered < scores.shape[-1])).all(dim=-1)
        valid &= (ordered[..., 1:] != ordered[..., :-1]).all(dim=-1)
        safe = torch.where(valid.unsqueeze(-1), pinned, own)
        values = scores.gather(-1, safe)
        scale = scores.abs().amax(dim=-1).clamp_min(torch.finfo(scores.dtype).tiny)
        gap = (own_values[..., -1] - values.amin(dim=-1)) / scale
        gap = torch.where(valid, gap.clamp_min(0.), torch.full_like(gap, float('inf')))
        differing = (ordered != own.sort(dim=-1).values).any(dim=-1)
        self.checks.append(PinnedSelection(
            tuple(own.shape), differing.numel(), int(differing.sum()),
            float(gap.max()) if gap.numel() else 0.))
        return values, safe

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if exc[0] is None and len(self.checks) != len(self.indices):
            raise ValueError(f'{len(self.indices)} pinned selections given, the model made '
                             f'{len(self.checks)}')

"""QuadTree attention's sparse operations (Tang et al., arXiv:2201.02767):
the official CUDA ops ``score_computation`` and ``value_aggregation`` and the
top-k key selection, in PyTorch on any device and floating dtype.

Fast path ``quadtree_chunks``: :class:`GatheredScores` and
:class:`GatheredAggregate` gather the candidate keys / values in row chunks
and use batched matmuls, forward and backward; they save only their inputs,
so memory stays ``O(N * K)`` per level (the gathered ``(N, K, head_dim)``
blocks exist one chunk at a time); :func:`top_keys` scores the keys in row
chunks without autograd, so no ``N x M`` map is kept.  The plain path
gathers every candidate at once and lets autograd record it (what a
captured graph, ``torch.compile`` or export, takes).

Its discrete top-k selections can be recorded or pinned, to check an exported
graph whose selection may flip between near-equal scores
(``docs/deployment.md``).  Layers select through :func:`top_k`.  Off (the
default) it is ``scores.topk(k, dim=-1)`` behind one module-level ``None``
check: no extra work in training or inference, and nothing for
``torch.compile`` to break on.

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
import torch.nn.functional as F
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from .autograd import is_capturing
from .registry import register_fast_path

register_fast_path(
    'quadtree_chunks', "QuadTree's candidate gathers (custom autograd, saving only the inputs) "
    'and coarse top-k in row chunks: transient memory O(N * K) per level, no N x M map')

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


#: largest number of gathered elements (rows x candidates x head_dim) held
#: at once by the chunked ops; bounds their transient memory (2 ** 20
#: elements: 4 MiB in float32, small enough to stay in cache between the
#: gather and its matmul)
GATHER_CHUNK_ELEMENTS = 1 << 20


def _row_chunks(rows: int, row_elements: int):
    """Row slices holding at most :data:`GATHER_CHUNK_ELEMENTS` elements."""
    step = max(1, GATHER_CHUNK_ELEMENTS // max(row_elements, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))


def _flat_index(index: torch.Tensor, length: int) -> torch.Tensor:
    """``(G, P, K)`` per-group block indices -> ``(G * P, K)`` indices into
    the ``G * length`` blocks of all groups."""
    offsets = torch.arange(index.shape[0], device=index.device) * length
    return (index + offsets.view(-1, 1, 1)).flatten(0, 1)


def _gather_blocks(blocks: torch.Tensor, flat_index: torch.Tensor) -> torch.Tensor:
    """``blocks`` ``(G*M, R, D)`` at ``flat_index`` ``(c, K)`` -> ``(c, K*R, D)``
    (``F.embedding`` on whole blocks: contiguous rows, the fastest gather)."""
    c, k = flat_index.shape
    r, d = blocks.shape[1:]
    return F.embedding(flat_index, blocks.view(-1, r * d)).view(c, k * r, d)


def _scatter_add_blocks(target: torch.Tensor, flat_index: torch.Tensor,
                        part: torch.Tensor) -> None:
    """Adjoint of :func:`_gather_blocks`: add ``part`` ``(c, K*R, D)`` into
    ``target`` ``(G*M, R, D)`` at ``flat_index``."""
    target.view(target.shape[0], -1).index_add_(
        0, flat_index.reshape(-1), part.view(flat_index.numel(), -1))


# Both functions work on the (G * P)-row views of their tensors, in row chunks
# that bound the gathered blocks; each chunk's product is written in place.
class GatheredScores(Function):
    """``out[g, p, f, k*R + r] = q[g, p, f] . k[g, index[g, p, k], r]``: the
    official ``score_computation`` (the F child queries of parent ``p``
    share its candidates) with the candidate keys gathered as whole blocks
    of R = 4 siblings, in row chunks."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        g, p, f, d = q.shape
        m, r = k.shape[1:3]
        flat, blocks, rows = _flat_index(index, m), k.view(g * m, r, d), q.view(g * p, f, d)
        out = q.new_empty(g * p, f, index.shape[-1] * r)
        for s in _row_chunks(g * p, out.shape[-1] * d):
            torch.bmm(rows[s], _gather_blocks(blocks, flat[s]).transpose(1, 2), out=out[s])
        ctx.save_for_backward(q, k, index)
        return out.view(g, p, f, -1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        q, k, index = ctx.saved_tensors
        g, p, f, d = q.shape
        m, r = k.shape[1:3]
        flat, blocks, rows = _flat_index(index, m), k.view(g * m, r, d), q.view(g * p, f, d)
        grad = grad.contiguous().view(g * p, f, -1)
        grad_q = torch.empty_like(rows) if ctx.needs_input_grad[0] else None
        grad_k = torch.zeros_like(blocks) if ctx.needs_input_grad[1] else None
        for s in _row_chunks(g * p, grad.shape[-1] * d):
            if grad_q is not None:
                torch.bmm(grad[s], _gather_blocks(blocks, flat[s]), out=grad_q[s])
            if grad_k is not None:
                _scatter_add_blocks(grad_k, flat[s], grad[s].transpose(1, 2) @ rows[s])
        return (None if grad_q is None else grad_q.view_as(q),
                None if grad_k is None else grad_k.view_as(k), None)


class GatheredAggregate(Function):
    """``out[g, p, f] = sum_{k, r} attn[g, p, f, k*R + r] * v[g, index[g, p, k], r]``:
    the official ``value_aggregation`` with block-gathered values, in row
    chunks."""

    @staticmethod
    def forward(ctx, attn: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        g, p, f, j = attn.shape
        m, r, d = v.shape[1:]
        flat, blocks, rows = _flat_index(index, m), v.view(g * m, r, d), attn.view(g * p, f, j)
        out = v.new_empty(g * p, f, d)
        for s in _row_chunks(g * p, j * d):
            torch.bmm(rows[s], _gather_blocks(blocks, flat[s]), out=out[s])
        ctx.save_for_backward(attn, v, index)
        return out.view(g, p, f, d)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        attn, v, index = ctx.saved_tensors
        g, p, f, j = attn.shape
        m, r, d = v.shape[1:]
        flat, blocks, rows = _flat_index(index, m), v.view(g * m, r, d), attn.view(g * p, f, j)
        grad = grad.contiguous().view(g * p, f, d)
        grad_attn = torch.empty_like(rows) if ctx.needs_input_grad[0] else None
        grad_v = torch.zeros_like(blocks) if ctx.needs_input_grad[1] else None
        for s in _row_chunks(g * p, j * d):
            if grad_attn is not None:
                torch.bmm(grad[s], _gather_blocks(blocks, flat[s]).transpose(1, 2),
                          out=grad_attn[s])
            if grad_v is not None:
                _scatter_add_blocks(grad_v, flat[s], rows[s].transpose(1, 2) @ grad[s])
        return (None if grad_attn is None else grad_attn.view_as(attn),
                None if grad_v is None else grad_v.view_as(v), None)


def _chunks_apply(fast: bool) -> bool:
    """The gate of ``quadtree_chunks``: asked for and not captured as a graph
    (a capture would unroll the chunk loops and cannot trace ``out=``)."""
    return fast and not is_capturing()


def gathered_scores(q: torch.Tensor, k: torch.Tensor, index: torch.Tensor,
                    fast: bool = True) -> torch.Tensor:
    """Dot products of grouped queries with the blocks of candidate keys.

    Args:
        q: ``(G, P, F, D)`` queries; the ``F`` of row ``p`` share candidates.
        k: ``(G, M, R, D)`` keys in blocks of ``R`` (quadtree: the 4 children
            of each coarser cell).
        index: ``(G, P, K)`` int64 block indices in ``[0, M)``.
        fast: take :class:`GatheredScores` where its gate allows (the
            layer's ``quadtree_chunks`` switch).

    Returns:
        ``(G, P, F, K * R)`` scores, candidates ordered (block, row).
    """
    if _chunks_apply(fast):
        return GatheredScores.apply(q.contiguous(), k.contiguous(), index)
    g, p, f, d = q.shape
    m, r = k.shape[1:3]
    blocks = _gather_blocks(k.reshape(g * m, r, d), _flat_index(index, m))
    return (q.reshape(g * p, f, d) @ blocks.transpose(1, 2)).view(g, p, f, -1)


def gathered_aggregate(attn: torch.Tensor, v: torch.Tensor, index: torch.Tensor,
                       fast: bool = True) -> torch.Tensor:
    """Weighted sums of candidate values: ``attn`` ``(G, P, F, K * R)``,
    ``v`` ``(G, M, R, D)`` blocks, ``index`` ``(G, P, K)`` -> ``(G, P, F, D)``
    (:class:`GatheredAggregate` where ``fast`` and its gate allow)."""
    if _chunks_apply(fast):
        return GatheredAggregate.apply(attn.contiguous(), v.contiguous(), index)
    g, p, f, j = attn.shape
    m, r, d = v.shape[1:]
    blocks = _gather_blocks(v.reshape(g * m, r, d), _flat_index(index, m))
    return (attn.reshape(g * p, f, j) @ blocks).view(g, p, f, d)


def top_keys(q: torch.Tensor, k: torch.Tensor, topk: int, fast: bool = True) -> torch.Tensor:
    """Indices ``(G, N, topk)`` of each query's ``topk`` best keys by score
    (= by attention probability).  Where ``fast`` and its gate allow, in row
    chunks without autograd; otherwise from the whole ``N x M`` scores
    (always while the selections are recorded or pinned:
    :func:`top_k`)."""
    if not _chunks_apply(fast) or selecting():
        return top_k(q @ k.transpose(-1, -2), topk)[1]
    g, n, _ = q.shape
    out = torch.empty(g, n, topk, dtype=torch.long, device=q.device)
    with torch.no_grad():
        for s in _row_chunks(n, g * k.shape[1]):
            out[:, s] = (q[:, s] @ k.transpose(-1, -2)).topk(topk, dim=-1).indices
    return out

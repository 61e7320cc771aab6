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
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from ..utils.tracing import is_capturing
from .registry import register_fast_path
from .selection import selecting, top_k

register_fast_path(
    'quadtree_chunks', "QuadTree's candidate gathers (custom autograd, saving only the inputs) "
    'and coarse top-k in row chunks: transient memory O(N * K) per level, no N x M map')

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
    :mod:`~vattn_mm.ops.selection`)."""
    if not _chunks_apply(fast) or selecting():
        return top_k(q @ k.transpose(-1, -2), topk)[1]
    g, n, _ = q.shape
    out = torch.empty(g, n, topk, dtype=torch.long, device=q.device)
    with torch.no_grad():
        for s in _row_chunks(n, g * k.shape[1]):
            out[:, s] = (q[:, s] @ k.transpose(-1, -2)).topk(topk, dim=-1).indices
    return out

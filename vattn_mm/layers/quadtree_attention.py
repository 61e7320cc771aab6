"""QuadTree attention (Tang et al., "QuadTree Attention for Vision
Transformers", ICLR 2022, arXiv:2201.02767) in pure PyTorch.

Queries, keys and values form token pyramids (2x2 average pooling per level;
type B builds the value pyramid with learned conv branches).  The coarsest
level gets full attention; every finer level attends, for each query, only to
the 4 children of the top-K keys its parent query selected one level up.

The official CUDA ops ``score_computation`` and ``value_aggregation`` are
replaced by :func:`gathered_scores` and :func:`gathered_aggregate`: custom
autograd functions that gather the candidate keys / values in chunks and use
batched matmuls, forward and backward, on any device and floating dtype.  They
save only their inputs, so memory stays ``O(N * K)`` per level (the gathered
``(N, K, head_dim)`` blocks exist one chunk at a time) and no ``N x N``
attention map is built anywhere but at the coarsest level.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer
from mmengine.logging import print_log
from torch import nn
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from ..utils.tracing import is_capturing
from .attention import attention_width
from .builder import ZooVariant, register_mixer
from .conv import DepthwiseConv2d
from .patch_embed import Size, map_to_tokens, tokens_to_map
from .selection import selecting, top_k

#: largest number of gathered elements (rows x candidates x head_dim) held
#: at once by the sparse ops; bounds their transient memory (4 MiB in fp32,
#: small enough to stay in cache between the gather and its matmul)
GATHER_CHUNK_ELEMENTS = 1 << 20

_TOPK_CLAMP_LOGGED = False


# --------------------------------------------------------------- indexing
def group_children(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """``(G, H*W, D)`` row-major tokens -> ``(G, H*W/4, 4, D)``: the 4 tokens of
    each 2x2 cell (row-major cells, children ordered (dy, dx))."""
    g, _, d = x.shape
    h, w = hw
    x = x.view(g, h // 2, 2, w // 2, 2, d).transpose(2, 3)
    return x.reshape(g, h * w // 4, 4, d)


def ungroup_children(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """Inverse of :func:`group_children` (``hw`` is the fine size)."""
    g, _, _, d = x.shape
    h, w = hw
    x = x.view(g, h // 2, w // 2, 2, 2, d).transpose(2, 3)
    return x.reshape(g, h * w, d)


def child_index(parents: torch.Tensor, child: torch.Tensor, parent_width: int) -> torch.Tensor:
    """Flat index, on the grid twice as large, of child ``child`` (0..3, ordered
    (dy, dx)) of the cells ``parents`` (flat indices on a ``parent_width`` grid)."""
    row, col = parents // parent_width, parents % parent_width
    return (2 * row + child // 2) * (2 * parent_width) + 2 * col + child % 2


def _chunks(rows: int, row_elements: int):
    """Row slices holding at most ``GATHER_CHUNK_ELEMENTS`` gathered elements."""
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


# ------------------------------------------------------------- sparse ops
# Both ops work on the (G * P)-row views of their tensors, in row chunks that
# bound the gathered blocks; each chunk's product is written in place.
class _GatheredScores(Function):
    """``out[g, p, f, k*R + r] = q[g, p, f] . k[g, index[g, p, k], r]``: the
    official ``score_computation`` (the F child queries of parent ``p``
    share its candidates) with the candidate keys gathered as whole blocks
    of R = 4 siblings."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        g, p, f, d = q.shape
        m, r = k.shape[1:3]
        flat, blocks, rows = _flat_index(index, m), k.view(g * m, r, d), q.view(g * p, f, d)
        out = q.new_empty(g * p, f, index.shape[-1] * r)
        for s in _chunks(g * p, out.shape[-1] * d):
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
        for s in _chunks(g * p, grad.shape[-1] * d):
            if grad_q is not None:
                torch.bmm(grad[s], _gather_blocks(blocks, flat[s]), out=grad_q[s])
            if grad_k is not None:
                _scatter_add_blocks(grad_k, flat[s], grad[s].transpose(1, 2) @ rows[s])
        return (None if grad_q is None else grad_q.view_as(q),
                None if grad_k is None else grad_k.view_as(k), None)


class _GatheredAggregate(Function):
    """``out[g, p, f] = sum_{k, r} attn[g, p, f, k*R + r] * v[g, index[g, p, k], r]``:
    the official ``value_aggregation`` with block-gathered values."""

    @staticmethod
    def forward(ctx, attn: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        g, p, f, j = attn.shape
        m, r, d = v.shape[1:]
        flat, blocks, rows = _flat_index(index, m), v.view(g * m, r, d), attn.view(g * p, f, j)
        out = v.new_empty(g * p, f, d)
        for s in _chunks(g * p, j * d):
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
        for s in _chunks(g * p, j * d):
            if grad_attn is not None:
                torch.bmm(grad[s], _gather_blocks(blocks, flat[s]).transpose(1, 2),
                          out=grad_attn[s])
            if grad_v is not None:
                _scatter_add_blocks(grad_v, flat[s], rows[s].transpose(1, 2) @ grad[s])
        return (None if grad_attn is None else grad_attn.view_as(attn),
                None if grad_v is None else grad_v.view_as(v), None)


def gathered_scores(q: torch.Tensor, k: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Dot products of grouped queries with the blocks of candidate keys.

    Args:
        q: ``(G, P, F, D)`` queries; the ``F`` of row ``p`` share candidates.
        k: ``(G, M, R, D)`` keys in blocks of ``R`` (quadtree: the 4 children
            of each coarser cell).
        index: ``(G, P, K)`` int64 block indices in ``[0, M)``.

    Returns:
        ``(G, P, F, K * R)`` scores, candidates ordered (block, row).
    """
    if is_capturing():   # one gather, no chunks or in-place writes
        g, p, f, d = q.shape
        m, r = k.shape[1:3]
        blocks = _gather_blocks(k.reshape(g * m, r, d), _flat_index(index, m))
        return (q.reshape(g * p, f, d) @ blocks.transpose(1, 2)).view(g, p, f, -1)
    return _GatheredScores.apply(q.contiguous(), k.contiguous(), index)


def gathered_aggregate(attn: torch.Tensor, v: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Weighted sums of candidate values: ``attn`` ``(G, P, F, K * R)``,
    ``v`` ``(G, M, R, D)`` blocks, ``index`` ``(G, P, K)`` -> ``(G, P, F, D)``."""
    if is_capturing():
        g, p, f, j = attn.shape
        m, r, d = v.shape[1:]
        blocks = _gather_blocks(v.reshape(g * m, r, d), _flat_index(index, m))
        return (attn.reshape(g * p, f, j) @ blocks).view(g, p, f, d)
    return _GatheredAggregate.apply(attn.contiguous(), v.contiguous(), index)


# ----------------------------------------------------------- the attention
def _clamp_topk(k: int, available: int, level: int) -> int:
    """Clamp a top-k to the candidates available, logging that once (in eager
    runs: mmengine's logger cannot be traced, so under ``torch.compile`` the
    clamp is silent rather than a graph break)."""
    global _TOPK_CLAMP_LOGGED
    if isinstance(available, torch.Tensor):   # traced size (export): clamp in the graph
        return torch.clamp(available, max=k)
    if k <= available:
        return k
    if not _TOPK_CLAMP_LOGGED and not torch.compiler.is_compiling():
        _TOPK_CLAMP_LOGGED = True
        print_log(
            f'QuadtreeAttention: top-k {k} at pyramid level {level} (0 = coarsest) '
            f'exceeds the {available} candidate keys there (small input); using '
            f'top-{available}. Logged once; later clamps are silent.',
            logger='current', level=logging.WARNING)
    return available


def _top_keys(q: torch.Tensor, k: torch.Tensor, topk: int) -> torch.Tensor:
    """Indices ``(G, N, topk)`` of each query's ``topk`` best keys by score
    (= by attention probability), computed in row chunks without autograd so
    no ``N x M`` map is kept (whole, while captured as a graph or while
    recording / pinning the selections: :mod:`~vattn_mm.layers.selection`)."""
    if is_capturing() or selecting():
        return top_k(q @ k.transpose(-1, -2), topk)[1]
    g, n, _ = q.shape
    out = torch.empty(g, n, topk, dtype=torch.long, device=q.device)
    with torch.no_grad():
        for s in _chunks(n, g * k.shape[1]):
            out[:, s] = (q[:, s] @ k.transpose(-1, -2)).topk(topk, dim=-1).indices
    return out


def coarse_to_fine_attention(queries: Sequence[torch.Tensor], keys: Sequence[torch.Tensor],
                             values: Sequence[torch.Tensor], sizes: Sequence[Size],
                             topks: Sequence[int], attn_type: str = 'B') -> list[torch.Tensor]:
    """Coarse-to-fine quadtree attention messages, one per level.

    Args:
        queries, keys, values: per level ``(G, H_l * W_l, D)`` row-major
            tokens (``G`` = batch x heads), index 0 = coarsest level; level
            ``l + 1`` is twice as large as level ``l`` in each direction.
        sizes: ``(H_l, W_l)`` per level.
        topks: top-k per level, index 0 = coarsest (clamped to the
            candidates available, see :func:`_clamp_topk`).
        attn_type: ``'B'``: every level's message is a softmax over its
            candidates; ``'A'``: fine scores are a softmax over the 4 children
            of each parent key times the parent's score, and the top-k keys of
            every non-final level are left out of that level's message (they
            are refined at the next level).

    Returns:
        Per level ``(G, H_l * W_l, D)`` messages (not yet merged).
    """
    if attn_type not in ('A', 'B'):
        raise ValueError(f"attn_type must be 'A' or 'B', got {attn_type!r}")
    num_levels = len(queries)
    if len(topks) < num_levels:
        raise ValueError(f'{num_levels} pyramid levels need {num_levels} topks, got {list(topks)}')
    scale = queries[0].shape[-1] ** -0.5
    type_a = attn_type == 'A'
    messages = []

    # coarsest level: full attention
    q, k, v = queries[0], keys[0], values[0]
    selected = parent_scores = None
    if type_a:
        attn = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1)
        parent_scores, selected = top_k(attn, _clamp_topk(topks[0], k.shape[1], 0))
        messages.append(attn.scatter(-1, selected, 0.) @ v)
    else:
        messages.append(F.scaled_dot_product_attention(q, k, v))
        if num_levels > 1:
            selected = _top_keys(q, k, _clamp_topk(topks[0], k.shape[1], 0))

    for level in range(1, num_levels):
        hw, final = sizes[level], level == num_levels - 1
        q = group_children(queries[level] * scale, hw)                 # (G, P, 4, D)
        k, v = group_children(keys[level], hw), group_children(values[level], hw)
        scores = gathered_scores(q, k, selected)                       # (G, P, 4, 4K)
        if type_a:
            g, p, f, j = scores.shape
            attn = torch.softmax(scores.view(g, p, f, j // 4, 4), dim=-1)
            attn = (attn * parent_scores.view(g, p, 1, j // 4, 1)).view(g, p, f, j)
        else:
            attn = torch.softmax(scores, dim=-1)
        parents = selected
        if not final:
            keep = _clamp_topk(topks[level], attn.shape[-1], level)
            # type B needs only the positions: no autograd record for them
            top_scores, top_pos = top_k(attn if type_a else attn.detach(), keep)
            top_parents = parents.unsqueeze(2).expand(-1, -1, 4, -1).gather(-1, top_pos // 4)
            top_keys = child_index(top_parents, top_pos % 4, sizes[level - 1][1])
            selected = ungroup_children(top_keys, hw)                  # (G, N, k)
            if type_a:   # the top-k keys are refined at the next level instead
                parent_scores = ungroup_children(top_scores, hw)
                attn = attn.scatter(-1, top_pos, 0.)
        message = gathered_aggregate(attn, v, parents)                 # (G, P, 4, D)
        messages.append(ungroup_children(message, hw))
    return messages


def avg_pool_tokens(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """2x2 average pooling of ``(B, H*W, C)`` row-major tokens (even ``H, W``);
    a sum of 4 strided slices, several times faster than ``mean`` or
    ``avg_pool2d`` on this layout."""
    b, _, c = x.shape
    h, w = hw
    x = x.view(b, h // 2, 2, w // 2, 2, c)
    x = (x[:, :, 0, :, 0] + x[:, :, 0, :, 1] + x[:, :, 1, :, 0] + x[:, :, 1, :, 1]) * 0.25
    return x.reshape(b, h * w // 4, c)


def upsample_tokens(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """``(G, H*W, D)`` -> ``(G, 4*H*W, D)``: every token copied to its 4
    children (nearest 2x upsampling of the row-major grid ``hw``)."""
    g, _, d = x.shape
    h, w = hw
    x = x.view(g, h, 1, w, 1, d).expand(g, h, 2, w, 2, d)
    return x.reshape(g, 4 * h * w, d)


@register_mixer
class QuadtreeAttention(nn.Module):
    """Multi-head QuadTree attention over ``num_levels`` pyramid levels
    (official ``QuadtreeAttention`` + ``QTAttA`` / ``QTAttB``).

    Args:
        embed_dims: token channels.
        num_heads: attention heads (no upper limit, unlike the CUDA kernels).
        num_levels: pyramid levels (the official ``sr_ratio``); the map size
            must be divisible by ``2 ** (num_levels - 1)``.
        topks: top-k per level, index 0 = coarsest.  Official dense
            (detection / segmentation) default ``[32] * 4``; the ImageNet
            models hard-code ``[8] * 4``.  Values larger than the candidates
            available (small inputs) are clamped, logged once.
        attn_type: ``'B'`` (released models: learned level weights, LePE
            depthwise 3x3 convs, conv value pyramid) or ``'A'``
            (parameter-free: average-pooled values, score redistribution).
        qkv_bias: bias of the 1x1 query / key / value projections.
        value_act_cfg: activation inside the type-B value branches
            (``GroupNorm -> act -> 2x2 s2 conv -> GroupNorm -> act -> 1x1
            conv``): ReLU in the official dense code, GELU in the ImageNet one.
        proj_drop: dropout after the output projection.
        attn_dims: channels of the queries, keys, values and value pyramid
            (default ``embed_dims``); ``proj`` maps them back.

    The quadtree core runs in float32 with autocast disabled, like the
    official code (``.float()`` pyramids; the top-k selections are
    discrete), whatever the input dtype; projections and value branches
    follow autocast.  The message is cast back to the input dtype.
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'
    zoo_variants = {'quadtree_b': ZooVariant.per_stage(dict(topks=(8, 8, 8, 8)),
                                                       attn_dims=(32, 64, 320, 640))}

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """QuadTree-B's levels 4, 3, 2, 1 for strides 4 ... 32 (official ``sr_ratios``)."""
        return dict(num_levels=(4, 3, 2, 1)[min(stage, 3)])

    def __init__(self, embed_dims: int, num_heads: int, num_levels: int,
                 topks: Sequence[int] = (32, 32, 32, 32), attn_type: str = 'B',
                 qkv_bias: bool = True,
                 value_act_cfg: Optional[dict] = dict(type='ReLU'),
                 proj_drop: float = 0., attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if attn_type not in ('A', 'B'):
            raise ValueError(f"attn_type must be 'A' or 'B', got {attn_type!r}")
        if num_levels < 1 or len(topks) < num_levels:
            raise ValueError(f'{num_levels} pyramid levels need at least '
                             f'{num_levels} topks, got {list(topks)}')
        if any(k < 1 for k in topks):
            raise ValueError(f'topks must be positive, got {list(topks)}')
        self.num_heads = num_heads
        self.num_levels = num_levels
        self.topks = list(topks)
        self.attn_type = attn_type
        self.attn_dims = width
        self.q_proj = nn.Conv2d(embed_dims, width, 1, bias=qkv_bias)
        self.k_proj = nn.Conv2d(embed_dims, width, 1, bias=qkv_bias)
        self.v_proj = nn.Conv2d(embed_dims, width, 1, bias=qkv_bias)
        if attn_type == 'B':
            self.level_logits = nn.Parameter(torch.randn(num_levels))
            self.lepe_convs = nn.ModuleList(
                DepthwiseConv2d(width, 3)
                for _ in range(num_levels))
            self.value_downsamples = nn.ModuleList(
                nn.Sequential(
                    nn.GroupNorm(1, width), build_activation_layer(value_act_cfg),
                    nn.Conv2d(width, width, 2, stride=2),
                    nn.GroupNorm(1, width), build_activation_layer(value_act_cfg),
                    nn.Conv2d(width, width, 1))
                for _ in range(num_levels - 1))
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def size_multiple(self) -> int:
        """What the map height and width must be divisible by."""
        return 2 ** (self.num_levels - 1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, C)`` tokens -> ``(B * heads, N, C // heads)`` float32."""
        b, n, c = x.shape
        x = x.view(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)
        return x.reshape(b * self.num_heads, n, c // self.num_heads).float()

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, a = x.shape[0], x.shape[1], self.attn_dims
        h, w = hw
        if h % self.size_multiple or w % self.size_multiple:
            raise ValueError(
                f'QuadtreeAttention with {self.num_levels} levels needs a map whose '
                f'sides are divisible by {self.size_multiple}, got {h}x{w}; pad the '
                'input (the QuadTree backbone pads images to a multiple of 32)')
        # 1x1-conv projections applied as linears on the tokens
        q, k, v = (F.linear(x, conv.weight.flatten(1), conv.bias)
                   for conv in (self.q_proj, self.k_proj, self.v_proj))
        qs, ks, vs, sizes = [q], [k], [v], [(h, w)]
        for i in range(self.num_levels - 1):
            size = sizes[-1]
            qs.append(avg_pool_tokens(qs[-1], size))
            ks.append(avg_pool_tokens(ks[-1], size))
            vs.append(map_to_tokens(self.value_downsamples[i](tokens_to_map(vs[-1], size)))[0]
                      if self.attn_type == 'B' else avg_pool_tokens(vs[-1], size))
            sizes.append((size[0] // 2, size[1] // 2))
        qs, ks, vs, sizes = qs[::-1], ks[::-1], vs[::-1], sizes[::-1]   # coarsest first
        if self.attn_type == 'B':
            lepes = [map_to_tokens(conv(tokens_to_map(v, size)))[0]
                     for conv, v, size in zip(self.lepe_convs, vs, sizes)]

        with torch.autocast(x.device.type, enabled=False):
            messages = coarse_to_fine_attention(
                [self._heads(t) for t in qs], [self._heads(t) for t in ks],
                [self._heads(t) for t in vs], sizes, self.topks, self.attn_type)
            if self.attn_type == 'B':
                weights = torch.softmax(self.level_logits.float(), dim=0)
                messages = [(m + self._heads(lepe)) * wt
                            for m, lepe, wt in zip(messages, lepes, weights)]
            out = messages[0]
            for level in range(1, self.num_levels):
                out = upsample_tokens(out, sizes[level - 1]) + messages[level]
        out = out.view(b, self.num_heads, n, a // self.num_heads).transpose(1, 2)
        out = out.reshape(b, n, a).to(x.dtype)
        return self.proj_drop(self.proj(out))

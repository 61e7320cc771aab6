"""QuadTree attention (Tang et al., "QuadTree Attention for Vision
Transformers", ICLR 2022, arXiv:2201.02767) in pure PyTorch.

Queries, keys and values form token pyramids (2x2 average pooling per level;
type B builds the value pyramid with learned conv branches).  The coarsest
level gets full attention; every finer level attends, for each query, only to
the 4 children of the top-K keys its parent query selected one level up.

The official CUDA ops ``score_computation`` and ``value_aggregation`` are
:func:`~vattn_mm.ops.quadtree.gathered_scores` and
:func:`~vattn_mm.ops.quadtree.gathered_aggregate` (any device and floating
dtype; their chunked forms are the fast path ``quadtree_chunks``), so no
``N x N`` attention map is built anywhere but at the coarsest level.
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..ops import DepthwiseConv2d
from ..ops.quadtree import gathered_aggregate, gathered_scores, top_keys
from ..ops.quadtree import top_k
from ..utils.compat import is_compiling
from .attention import attention_width
from .bricks import build_activation
from .builder import register_mixer
from .tokens import Size, map_to_tokens, tokens_to_map

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


# ----------------------------------------------------------- the attention
def _clamp_topk(k: int, available: int, level: int) -> int:
    """Clamp a top-k to the candidates available, logging that once (in eager
    runs: a warning cannot be traced, so under ``torch.compile`` the
    clamp is silent rather than a graph break)."""
    global _TOPK_CLAMP_LOGGED
    if isinstance(available, torch.Tensor):   # traced size (export): clamp in the graph
        return torch.clamp(available, max=k)
    if k <= available:
        return k
    if not _TOPK_CLAMP_LOGGED and not is_compiling():
        _TOPK_CLAMP_LOGGED = True
        warnings.warn(f'QuadtreeAttention: top-k {k} at pyramid level {level} (0 = coarsest) '
                      f'exceeds the {available} candidate keys there (small input); using '
                      f'top-{available}. Said once; later clamps are silent.', stacklevel=2)
    return available


def coarse_to_fine_attention(queries: Sequence[torch.Tensor], keys: Sequence[torch.Tensor],
                             values: Sequence[torch.Tensor], sizes: Sequence[Size],
                             topks: Sequence[int], attn_type: str = 'B',
                             fast: bool = True) -> list[torch.Tensor]:
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
        fast: let the sparse operations take their chunked fast path
            (``quadtree_chunks``) where its gate allows.

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
            selected = top_keys(q, k, _clamp_topk(topks[0], k.shape[1], 0), fast)

    for level in range(1, num_levels):
        hw, final = sizes[level], level == num_levels - 1
        q = group_children(queries[level] * scale, hw)                 # (G, P, 4, D)
        k, v = group_children(keys[level], hw), group_children(values[level], hw)
        scores = gathered_scores(q, k, selected, fast)                 # (G, P, 4, 4K)
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
            fine_keys = child_index(top_parents, top_pos % 4, sizes[level - 1][1])
            selected = ungroup_children(fine_keys, hw)                  # (G, N, k)
            if type_a:   # the top-k keys are refined at the next level instead
                parent_scores = ungroup_children(top_scores, hw)
                attn = attn.scatter(-1, top_pos, 0.)
        message = gathered_aggregate(attn, v, parents, fast)           # (G, P, 4, D)
        messages.append(ungroup_children(message, hw))
    return messages


def avg_pool_tokens(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """2x2 average pooling of ``(B, H*W, C)`` row-major tokens (even ``H, W``);
    a sum of 4 strided slices (faster than ``mean`` or ``avg_pool2d`` on
    this layout: docs/benchmarks.md)."""
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
                    nn.GroupNorm(1, width), build_activation(value_act_cfg),
                    nn.Conv2d(width, width, 2, stride=2),
                    nn.GroupNorm(1, width), build_activation(value_act_cfg),
                    nn.Conv2d(width, width, 1))
                for _ in range(num_levels - 1))
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.chunks = ops.switch('quadtree_chunks')

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

        with ops.autocast_off(x.device.type):
            messages = coarse_to_fine_attention(
                [self._heads(t) for t in qs], [self._heads(t) for t in ks],
                [self._heads(t) for t in vs], sizes, self.topks, self.attn_type,
                fast=self.chunks.on(x))
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

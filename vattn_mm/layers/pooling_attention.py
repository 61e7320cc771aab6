"""Pyramid-pooling attention (P2T: Pyramid Pooling Transformer for Scene
Understanding, Wu et al., TPAMI 2022, arXiv:2106.12011)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import DepthwiseConv2d, is_exporting
from .attention import attention_width, merge_heads, split_heads
from .bricks import build_norm
from .builder import register_mixer
from .export_ops import adaptive_avg_pool2d
from .tokens import Size, tokens_to_map


#: the official pooling ratios of every released P2T, one tuple per stage
P2T_POOL_RATIOS = ((12, 16, 20, 24), (6, 8, 10, 12), (3, 4, 5, 6), (1, 2, 3, 4))


def pooled_size(hw: Size, ratio: float) -> Size:
    """Side lengths of the map pooled by ``ratio``: ``round(side / ratio)``
    with Python's banker's rounding as in the official code, but at least 1.

    The official code crashes when a side rounds to 0 (e.g. stage 4 of an
    input of 64 px or less: ``round(2 / 4) == 0``); pooling to 1 there is the
    limit the other ratios already reach (a global average), and every size
    the official code accepts gives exactly its result.
    """
    if is_exporting():   # traced sizes: the same rounding (half to even) as tensors
        return tuple(torch.round(torch.as_tensor(side, dtype=torch.float64) / ratio)
                     .clamp(min=1).long() for side in hw)
    return tuple(max(1, round(side / ratio)) for side in hw)


def make_pool_convs(embed_dims: int, num_pools: int) -> nn.ModuleList:
    """The depthwise 3x3 convs refining each pooled map (official
    ``d_convs{s}``: one per pool ratio, shared by all blocks of a stage)."""
    return nn.ModuleList(
        DepthwiseConv2d(embed_dims, 3)
        for _ in range(num_pools))


@register_mixer
class PyramidPoolingAttention(nn.Module):
    """Multi-head attention whose keys and values come from a pyramid of
    adaptive average poolings of the map.

    For each ratio ``r`` the ``(H, W)`` map is pooled to
    :func:`pooled_size` ``((H, W), r)``, refined as ``p + conv_r(p)`` by a
    depthwise 3x3 conv; the pooled tokens of all ratios are concatenated in
    ratio order, normalised and projected to keys and values.  Queries come
    from every token; attention runs through
    :func:`torch.nn.functional.scaled_dot_product_attention`, so the cost is
    ``N x sum(pooled tokens)``, not ``N x N``.

    The pooling convs belong to the stage (all its blocks share them:
    :meth:`build_shared`, stored as the stage's ``pool_convs``) and are
    passed to :meth:`forward`, so they are stored once.

    Args:
        embed_dims: token channels.
        num_heads: attention heads (``embed_dims`` must be divisible by it).
        pool_ratios: pooling ratios (map side / pooled side), in the order
            of the ``pool_convs`` given to :meth:`forward`.
        qkv_bias: bias on the query / key-value projections.
        norm_cfg: norm over the pooled tokens.
        attn_dims: width of queries, keys and values (default ``embed_dims``).
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'

    shared_name = 'pool_convs'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """P2T's pooling ratios of stage ``stage`` (:data:`P2T_POOL_RATIOS`)."""
        return dict(pool_ratios=P2T_POOL_RATIOS[min(stage, 3)])

    @staticmethod
    def build_shared(embed_dims: int, pool_ratios: Sequence[float], **_) -> nn.ModuleList:
        """The stage's pooling convs (:func:`make_pool_convs`)."""
        return make_pool_convs(embed_dims, len(pool_ratios))

    def __init__(self, embed_dims: int, num_heads: int, pool_ratios: Sequence[float],
                 qkv_bias: bool = True, norm_cfg: dict = dict(type='LN', eps=1e-5),
                 attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if not pool_ratios or any(r <= 0 for r in pool_ratios):
            raise ValueError(f'pool_ratios must be a non-empty list of positive '
                             f'numbers, got {list(pool_ratios)}')
        self.num_heads = num_heads
        self.pool_ratios = tuple(pool_ratios)
        self.q = nn.Linear(embed_dims, width, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self.norm = build_norm(norm_cfg, embed_dims)

    def pool(self, x: torch.Tensor, hw: Size, pool_convs: nn.ModuleList) -> torch.Tensor:
        """(B, N, C) tokens -> (B, sum of pooled tokens, C) normalised tokens."""
        if len(pool_convs) != len(self.pool_ratios):
            raise ValueError(f'{len(pool_convs)} pooling convs for '
                             f'{len(self.pool_ratios)} pool ratios')
        x = tokens_to_map(x, hw)
        pools = []
        for ratio, conv in zip(self.pool_ratios, pool_convs):
            p = adaptive_avg_pool2d(x, pooled_size(hw, ratio))
            pools.append((p + conv(p)).flatten(2))
        return self.norm(torch.cat(pools, dim=2).transpose(1, 2))

    def forward(self, x: torch.Tensor, hw: Size, pool_convs: nn.ModuleList) -> torch.Tensor:
        q = split_heads(self.q(x), self.num_heads)
        k, v = split_heads(self.kv(self.pool(x, hw, pool_convs)),
                           2 * self.num_heads).chunk(2, dim=1)
        return self.proj(merge_heads(F.scaled_dot_product_attention(q, k, v)))

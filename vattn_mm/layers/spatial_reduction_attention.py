"""PVT's spatial-reduction attention (SRA), PVTv2's token mixer."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import TokenMapConv2d
from .attention import attention_width, merge_heads, split_heads
from .bricks import build_norm
from .builder import register_mixer
from .export_ops import AdaptiveAvgPool2d
from .tokens import Size, map_to_tokens, tokens_to_map


@register_mixer
class SpatialReductionAttention(nn.Module):
    """Multi-head attention whose keys and values come from a spatially
    reduced copy of the map (PVT, arXiv:2102.12122; PVTv2, arXiv:2106.13797).

    ``linear=False``: a ``sr_ratio`` x ``sr_ratio`` strided conv reduces the
    map (none when ``sr_ratio == 1``).  ``linear=True`` ("linear SRA"): an
    adaptive average pool to ``pool_size`` x ``pool_size``, a 1x1 conv and GELU,
    so the cost is linear in the number of tokens.  Attention runs through
    :func:`torch.nn.functional.scaled_dot_product_attention`.
    ``attn_dims``: width of queries, keys and values (default ``embed_dims``).
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """PVT / PVTv2's reduction ratios 8, 4, 2, 1 for strides 4 ... 32."""
        return dict(sr_ratio=(8, 4, 2, 1)[min(stage, 3)])

    def __init__(self, embed_dims: int, num_heads: int, sr_ratio: int = 1,
                 linear: bool = False, pool_size: int = 7, qkv_bias: bool = True,
                 attn_drop: float = 0., proj_drop: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-5), attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        self.num_heads = num_heads
        self.attn_drop = attn_drop
        self.q = nn.Linear(embed_dims, width, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        if linear:
            self.pool = AdaptiveAvgPool2d(pool_size)
            self.sr = nn.Conv2d(embed_dims, embed_dims, 1)
            self.act = nn.GELU()
        elif sr_ratio > 1:
            self.pool = nn.Identity()
            self.sr = TokenMapConv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.act = nn.Identity()
        self.reduces = linear or sr_ratio > 1
        self.window = 1 if linear else sr_ratio  # smallest map side the conv SR accepts
        if self.reduces:
            self.norm = build_norm(norm_cfg, embed_dims)

    def reduce(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        """Tokens the keys and values are computed from."""
        if not self.reduces:
            return x
        if min(hw) < self.window:
            raise ValueError(
                f'SpatialReductionAttention: a {hw[0]}x{hw[1]} map is smaller than its '
                f'{self.window}x{self.window} spatial reduction (sr_ratio={self.window}); '
                'the input image is too small for this stage, resize or pad it')
        y, _ = map_to_tokens(self.sr(self.pool(tokens_to_map(x, hw))))
        return self.act(self.norm(y))

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        q = split_heads(self.q(x), self.num_heads)
        k, v = split_heads(self.kv(self.reduce(x, hw)), 2 * self.num_heads).chunk(2, dim=1)
        x = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0.)
        return self.proj_drop(self.proj(merge_heads(x)))

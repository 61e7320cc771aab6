"""Global multi-head self-attention over all tokens (ViT, Dosovitskiy et
al., arXiv:2010.11929; DilateFormer's last stages)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention_width, merge_heads, split_heads
from .builder import ZooVariant, register_mixer
from .patch_embed import Size


@register_mixer
class GlobalSelfAttention(nn.Module):
    """Multi-head self-attention over all tokens with one ``qkv`` linear
    (``[3A, C]``, channels ``q | k | v``; ``A = attn_dims``, default ``C``)
    through :func:`torch.nn.functional.scaled_dot_product_attention`."""

    scaling = 'quadratic'
    full_attention = True
    inner_width = 'attn_dims'
    zoo_variants = {'global': ZooVariant(matched=False)}   # the quadratic baseline, no knob

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.,
                 proj_drop: float = 0., attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        self.num_heads = num_heads
        self.scale = qk_scale
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, 3 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        q, k, v = split_heads(self.qkv(x), 3 * self.num_heads).chunk(3, dim=1)
        x = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0., scale=self.scale)
        return self.proj_drop(self.proj(merge_heads(x)))

"""HiLo attention (LITv2, "Fast Vision Transformers with HiLo Attention",
Pan et al., NeurIPS 2022, arXiv:2205.13213)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention_width, merge_heads, split_heads
from .builder import register_mixer
from .tokens import Size, needs_padding, pad_to_multiple


@register_mixer
class HiLoAttention(nn.Module):
    """Multi-head attention whose heads are split by frequency.

    ``l_heads = int(num_heads * alpha)`` Lo-Fi heads attend from every token
    to the ``window_size`` x ``window_size`` average-pooled map (global, low
    frequencies); the other ``h_heads`` Hi-Fi heads attend inside
    non-overlapping ``window_size`` x ``window_size`` windows (local, high
    frequencies).  The two branches have their own projections and their
    outputs are concatenated as ``[Hi-Fi | Lo-Fi]`` channels (no joint
    projection).  ``window_size == 1`` is plain multi-head self-attention
    (all heads Lo-Fi, no pooling).

    A map whose sides are not multiples of ``window_size`` is zero-padded at
    the right / bottom and the output cropped back, as in the official dense
    code: the padded (zero) tokens are not masked, they take part in the
    Hi-Fi windows and in the Lo-Fi average pool.  Both branches run through
    :func:`torch.nn.functional.scaled_dot_product_attention` (Hi-Fi windows
    as the batch), with the official ``head_dim ** -0.5`` scale.

    Args:
        embed_dims: token channels.
        num_heads: total heads; ``embed_dims`` must be divisible by it.
        window_size: ``s`` in the paper (Hi-Fi window and Lo-Fi pool size).
        alpha: fraction of the heads given to Lo-Fi, in ``[0, 1]``.
        qkv_bias: bias of the query / key / value projections.
        attn_drop: dropout on the attention weights (training only).
        attn_dims: total width of the queries, keys and values of both
            branches (default ``embed_dims``), split between them as the
            heads are; each branch's projection maps its share back to its
            share of ``embed_dims``.
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """LITv2's settings: ``alpha`` 0.9, windows of 2 up to stride 16 and
        plain attention (window 1) at stride 32."""
        return dict(window_size=(2, 2, 2, 1)[min(stage, 3)], alpha=0.9)

    def __init__(self, embed_dims: int, num_heads: int, window_size: int = 2,
                 alpha: float = 0.5, qkv_bias: bool = True, attn_drop: float = 0.,
                 attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if window_size < 1:
            raise ValueError(f'HiLoAttention: window_size must be >= 1, got {window_size}')
        if not 0. <= alpha <= 1.:
            raise ValueError(f'HiLoAttention: alpha must be in [0, 1], got {alpha}')
        head_dims, attn_head_dims = embed_dims // num_heads, width // num_heads
        self.ws = window_size
        self.l_heads = num_heads if window_size == 1 else int(num_heads * alpha)
        self.h_heads = num_heads - self.l_heads
        self.l_dim = self.l_heads * head_dims        # output channels of each branch
        self.h_dim = self.h_heads * head_dims
        self.l_attn_dim = self.l_heads * attn_head_dims  # q / k / v channels of each branch
        self.h_attn_dim = self.h_heads * attn_head_dims
        self.attn_drop = attn_drop
        if self.l_heads:
            self.l_q = nn.Linear(embed_dims, self.l_attn_dim, bias=qkv_bias)
            self.l_kv = nn.Linear(embed_dims, 2 * self.l_attn_dim, bias=qkv_bias)
            self.l_proj = nn.Linear(self.l_attn_dim, self.l_dim)
        if self.h_heads:
            self.h_qkv = nn.Linear(embed_dims, 3 * self.h_attn_dim, bias=qkv_bias)
            self.h_proj = nn.Linear(self.h_attn_dim, self.h_dim)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0.)

    def hifi(self, x: torch.Tensor) -> torch.Tensor:
        """Window attention on a padded (B, Hp, Wp, C) map -> (B, Hp, Wp, h_dim)."""
        b, hp, wp, c = x.shape
        ws, hg, wg = self.ws, hp // self.ws, wp // self.ws
        windows = x.view(b, hg, ws, wg, ws, c).transpose(2, 3).reshape(b * hg * wg, ws * ws, c)
        q, k, v = split_heads(self.h_qkv(windows), 3 * self.h_heads).chunk(3, dim=1)
        out = merge_heads(self._attend(q, k, v))  # (B * windows, ws * ws, h_attn_dim)
        out = out.view(b, hg, wg, ws, ws, self.h_attn_dim).transpose(2, 3)
        return self.h_proj(out.reshape(b, hp, wp, self.h_attn_dim))

    def lofi(self, x: torch.Tensor, padded: torch.Tensor) -> torch.Tensor:
        """Every token of ``x`` (B, N, C) attends to the pooled ``padded`` map."""
        q = split_heads(self.l_q(x), self.l_heads)
        if self.ws > 1:
            kv = F.avg_pool2d(padded.permute(0, 3, 1, 2), self.ws).flatten(2).transpose(1, 2)
        else:
            kv = x
        k, v = split_heads(self.l_kv(kv), 2 * self.l_heads).chunk(2, dim=1)
        return self.l_proj(merge_heads(self._attend(q, k, v)))

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, c = x.shape
        h, w = hw
        padded = x.reshape(b, h, w, c)
        pad_b, pad_r = pad_to_multiple(h, self.ws), pad_to_multiple(w, self.ws)
        if needs_padding(pad_b, pad_r):
            padded = F.pad(padded, (0, 0, 0, pad_r, 0, pad_b))
        outs = []
        if self.h_heads:
            outs.append(self.hifi(padded)[:, :h, :w].reshape(b, n, self.h_dim))
        if self.l_heads:
            outs.append(self.lofi(x, padded))
        return torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]

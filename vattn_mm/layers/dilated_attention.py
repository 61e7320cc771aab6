"""Multi-scale dilated attention (DilateFormer, Jiao et al., IEEE TMM 2023,
arXiv:2302.01791): head groups attending over dilated ``k x k``
neighbourhoods, each group with its own dilation.

The neighbourhood attention itself is
:func:`~vattn_mm.ops.dilated_attention.dilated_local_attention` (per-offset
slicing views instead of the official ``nn.Unfold`` copies; its own backward
is the fast path ``dilated_attention_backward``); inference on large maps
goes in bands of rows (fast path ``dilated_bands``).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..ops import is_exporting
from ..ops.dilated_attention import (attend_in_row_bands, dilated_local_attention,
                                     dilated_local_attention_padded)
from .builder import register_mixer
from .tokens import Size


def default_dilations(num_heads: int) -> tuple[int, ...]:
    """The longest prefix of DilateFormer's dilations ``(1, 2, 3)`` whose
    length divides ``num_heads``."""
    return next(d for d in ((1, 2, 3), (1, 2), (1, )) if num_heads % len(d) == 0)


@register_mixer
class MultiScaleDilatedAttention(nn.Module):
    """Multi-scale dilated attention (MSDA) of DilateFormer.

    The heads are split into ``len(dilation)`` equal groups; group ``g``
    attends over a ``kernel_size x kernel_size`` neighbourhood sampled with
    dilation ``dilation[g]``.  ``qkv`` keeps the official 1x1-conv weight
    (``[3C, C, 1, 1]``, channels ``q | k | v``, each ``g0 | g1 | ...``) and the
    output channels are group-major, then ``proj``.  The queries, keys and
    values of one group at a time are computed (a third of the ``qkv`` output
    for three dilations), so the peak memory stays a small multiple of the map.
    Without autograd, maps of more than ``chunk_tokens`` tokens go in bands of
    rows, ``proj`` band by band (fast path ``dilated_bands``:
    :func:`~vattn_mm.ops.dilated_attention.attend_in_row_bands`).

    Args:
        embed_dims: channels ``C``.
        num_heads: heads, divisible by ``len(dilation)``.
        kernel_size: odd neighbourhood side.
        dilation: dilation of each head group; default DilateFormer's
            ``(1, 2, 3)``, cut to ``(1, 2)`` or ``(1,)`` where ``num_heads`` is
            not divisible by 3 (2).
        qkv_bias: bias of the ``qkv`` projection.
        qk_scale: logit scale (default ``head_dim ** -0.5``).
        attn_drop / proj_drop: dropout on attention weights / output.
        chunk_tokens: band size (tokens) in inference; ``None``: no bands.
        attn_dims: width ``A`` of queries, keys and values (default ``C``):
            ``qkv`` is ``[3A, C]``, ``proj`` maps ``A`` back to ``C``.
    """

    scaling = 'linear'
    inner_width = 'attn_dims'

    def macs(self, x_shape: Sequence[int]) -> int:
        """``qkv`` (C -> 3A, ``A = attn_dims``) and ``proj`` (A -> C)
        projections, and ``q . k`` and ``attn . v`` over ``kernel_size**2``
        neighbours per token and attention channel (what the official unfold
        + matmul counts, zero padding included)."""
        b, n, c = x_shape
        return b * n * self.attn_dims * (4 * c + 2 * self.kernel_size ** 2)

    def __init__(self, embed_dims: int, num_heads: int, kernel_size: int = 3,
                 dilation: Optional[Sequence[int]] = None, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.,
                 proj_drop: float = 0., chunk_tokens: Optional[int] = 16384,
                 attn_dims: Optional[int] = None):
        super().__init__()
        if dilation is None:
            dilation = default_dilations(num_heads)
        groups = len(dilation)
        width = embed_dims if attn_dims is None else attn_dims
        if (not isinstance(width, int) or width < 1 or embed_dims % num_heads
                or width % num_heads or num_heads % groups):
            raise ValueError(
                f'MultiScaleDilatedAttention: embed_dims {embed_dims} and attn_dims '
                f'{attn_dims} must be divisible by num_heads {num_heads}, and num_heads by '
                f'the number of dilations {groups} ({list(dilation)})')
        if kernel_size % 2 == 0:
            raise ValueError(f'MultiScaleDilatedAttention: kernel_size must be odd, '
                             f'got {kernel_size}')
        self.num_heads = num_heads
        self.attn_dims = width
        self.head_dims = width // num_heads
        self.kernel_size = kernel_size
        self.dilation = tuple(dilation)
        self.scale = qk_scale or self.head_dims ** -0.5
        self.attn_drop = attn_drop
        self.qkv = nn.Conv2d(embed_dims, 3 * width, 1, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.chunk_tokens = chunk_tokens
        self.bands = ops.switch('dilated_bands')
        self.own_backward = ops.switch('dilated_attention_backward')

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, c = x.shape
        if n != hw[0] * hw[1]:
            raise ValueError(f'MultiScaleDilatedAttention: {n} tokens do not form a '
                             f'{hw[0]}x{hw[1]} map')
        x = x.reshape(b, *hw, c)
        if is_exporting():
            return self._project(self._forward_export(x).view(b, n, self.attn_dims))
        return attend_in_row_bands(self._attend_group, self._project, x, self.reaches,
                                   self.attn_dims, self.chunk_tokens, fast=self.bands.on(x))

    @property
    def reaches(self) -> tuple[int, ...]:
        """How many rows (and columns) each head group's neighbourhood reaches."""
        return tuple(d * (self.kernel_size // 2) for d in self.dilation)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_drop(self.proj(x))

    def _forward_export(self, x: torch.Tensor) -> torch.Tensor:
        """The attention output (B, H, W, A) of all head groups for export:
        :func:`dilated_local_attention_padded`, no bands, no in-place writes."""
        qkv = F.linear(x, self.qkv.weight.flatten(1), self.qkv.bias)
        q, k, v = qkv.unflatten(-1, (3, len(self.dilation), -1, self.head_dims)).unbind(3)
        return torch.cat([
            dilated_local_attention_padded(q[..., g, :, :], k[..., g, :, :], v[..., g, :, :],
                                           self.kernel_size, dilation, self.scale)
            .flatten(-2) for g, dilation in enumerate(self.dilation)], dim=-1)

    def _attend_group(self, x: torch.Tensor, g: int, out: torch.Tensor) -> None:
        """Queries, keys and values of head group ``g`` only (rows
        ``t * A + g * width ...`` of ``qkv`` for ``t`` = q, k, v), attended into
        ``out`` (B, H, W, width); they are freed when the group is done."""
        c, width = self.attn_dims, out.shape[-1]
        weight, bias = self.qkv.weight.flatten(1), self.qkv.bias
        q, k, v = (
            F.linear(x, weight[rows], None if bias is None else bias[rows])
            .unflatten(-1, (-1, self.head_dims))
            for rows in (slice(t * c + g * width, t * c + (g + 1) * width) for t in range(3)))
        dilated_local_attention(
            q, k, v, self.kernel_size, self.dilation[g], self.scale,
            self.attn_drop if self.training else 0.,
            out=out.unflatten(-1, (-1, self.head_dims)), fast=self.own_backward.on(x))

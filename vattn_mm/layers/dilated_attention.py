"""Multi-scale dilated attention (DilateFormer, Jiao et al., IEEE TMM 2023,
arXiv:2302.01791), global multi-head self-attention and a plain MLP.

The official model gathers every ``k x k`` neighbourhood with ``nn.Unfold``,
i.e. it materialises ``k * k`` copies of the keys and of the values.  Here the
neighbourhood is visited one offset at a time: for each of the ``k * k``
offsets the overlapping part of the map is a pair of slicing *views* (no
copy, no padding), so the extra memory is one attention map (``k * k`` logits
per head and position) plus one product of the size of the queries.  Samples
outside the map contribute the logit 0 and the value 0, exactly like the zero
padding of the official ``nn.Unfold`` (they are not masked).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import eager_autograd, is_capturing, is_exporting
from .attention import attention_width, merge_heads, split_heads
from .builder import ZooVariant, register_mixer
from .patch_embed import Size


def _overlap(size: int, shift: int) -> tuple[slice, slice]:
    """Slices ``(dst, src)`` with ``src = dst + shift`` inside ``[0, size)``."""
    lo, hi = max(0, -shift), min(size, size - shift)
    return slice(lo, hi), slice(lo + shift, hi + shift)


def _windows(h: int, w: int, kernel_size: int, dilation: int) -> tuple[int, list]:
    """The number of offsets of a dilated ``k x k`` neighbourhood and, for
    each offset with samples inside an ``h x w`` map, ``(offset index,
    destination rows, source rows, destination cols, source cols)``."""
    if kernel_size % 2 == 0:
        raise ValueError(f'dilated attention needs an odd kernel_size, got {kernel_size}')
    radius = kernel_size // 2
    shifts = [(i * dilation, j * dilation)
              for i in range(-radius, radius + 1) for j in range(-radius, radius + 1)]
    windows = [(o, *_overlap(h, dy), *_overlap(w, dx)) for o, (dy, dx) in enumerate(shifts)]
    return len(shifts), [win for win in windows
                         if win[1].start < win[1].stop and win[3].start < win[3].stop]


def _attention_weights(q: torch.Tensor, k: torch.Tensor, num_offsets: int, windows: list,
                       scale: float) -> torch.Tensor:
    """Softmax over the offsets of ``scale * q_p . k_{p+o}`` (logit 0 outside
    the map): (B, H, W, heads, offsets)."""
    logits = q.new_zeros(*q.shape[:-1], num_offsets)
    for o, ys, ys_src, xs, xs_src in windows:
        logits[:, ys, xs, :, o] = (q[:, ys, xs] * k[:, ys_src, xs_src]).sum(-1)
    return (logits * scale).softmax(dim=-1)


def _aggregate(attn: torch.Tensor, v: torch.Tensor, windows: list,
               out: torch.Tensor) -> torch.Tensor:
    """``out_p = sum_o attn_{p,o} v_{p+o}`` into ``out`` (zeroed first)."""
    out.zero_()
    for o, ys, ys_src, xs, xs_src in windows:
        out[:, ys, xs].addcmul_(attn[:, ys, xs, :, o, None], v[:, ys_src, xs_src])
    return out


class _DilatedLocalAttention(torch.autograd.Function):
    """:func:`dilated_local_attention` without dropout, with its own backward:
    the same offset loop over slicing views, accumulating into one gradient
    buffer per input, where autograd would give every slice of every offset
    its own zero-filled full-size gradient to add up."""

    @staticmethod
    def forward(ctx, q, k, v, kernel_size: int, dilation: int, scale: float):
        num_offsets, windows = _windows(q.shape[1], q.shape[2], kernel_size, dilation)
        attn = _attention_weights(q, k, num_offsets, windows, scale)
        ctx.windows, ctx.scale = windows, scale
        ctx.save_for_backward(q, k, v, attn)
        return _aggregate(attn, v, windows, torch.empty_like(q))

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        q, k, v, attn = ctx.saved_tensors
        grad_attn, grad_v = torch.zeros_like(attn), torch.zeros_like(v)
        for o, ys, ys_src, xs, xs_src in ctx.windows:
            g = grad[:, ys, xs]
            grad_attn[:, ys, xs, :, o] = (g * v[:, ys_src, xs_src]).sum(-1)
            grad_v[:, ys_src, xs_src].addcmul_(attn[:, ys, xs, :, o, None], g)
        # softmax backward, then the logits' scale
        grad_logits = grad_attn.sub_((attn * grad_attn).sum(-1, keepdim=True)).mul_(attn)
        grad_logits.mul_(ctx.scale)
        grad_q, grad_k = torch.zeros_like(q), torch.zeros_like(k)
        for o, ys, ys_src, xs, xs_src in ctx.windows:
            weight = grad_logits[:, ys, xs, :, o, None]
            grad_q[:, ys, xs].addcmul_(weight, k[:, ys_src, xs_src])
            grad_k[:, ys_src, xs_src].addcmul_(weight, q[:, ys, xs])
        return grad_q, grad_k, grad_v, None, None, None


def dilated_local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            kernel_size: int, dilation: int, scale: float,
                            dropout_p: float = 0.,
                            out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Attention of every position over its dilated ``k x k`` neighbourhood.

    Args:
        q, k, v: ``(B, H, W, heads, head_dim)`` (channels-last, any strides).
        kernel_size: odd neighbourhood side ``k``.
        dilation: spacing of the neighbourhood samples.
        scale: logit scale (``head_dim ** -0.5`` in DilateFormer).
        dropout_p: dropout on the attention weights.
        out: optional ``(B, H, W, heads, head_dim)`` buffer (e.g. a view of a
            larger output) that receives the result; a new one otherwise.

    Returns:
        ``out``: for position ``p``, ``sum_o softmax_o(scale * q_p . k_{p+o}) v_{p+o}``
        over the offsets ``o`` with ``k_{p+o} = v_{p+o} = 0`` outside the map.

    In eager training without dropout the backward is
    :class:`_DilatedLocalAttention`'s.
    """
    if dropout_p == 0 and eager_autograd(q, k, v, under_autocast=True):
        result = _DilatedLocalAttention.apply(q, k, v, kernel_size, dilation, scale)
        return result if out is None else out.copy_(result)
    num_offsets, windows = _windows(q.shape[1], q.shape[2], kernel_size, dilation)
    attn = _attention_weights(q, k, num_offsets, windows, scale)
    if dropout_p > 0:
        attn = F.dropout(attn, dropout_p, training=True)
    return _aggregate(attn, v, windows, torch.empty_like(q) if out is None else out)


def dilated_local_attention_padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                   kernel_size: int, dilation: int,
                                   scale: float) -> torch.Tensor:
    """:func:`dilated_local_attention` (no dropout) for export: keys and
    values zero-padded by the neighbourhood's reach, each offset a slice with
    constant bounds (valid for any map size), no in-place writes."""
    if kernel_size % 2 == 0:
        raise ValueError(f'dilated attention needs an odd kernel_size, got {kernel_size}')
    reach = dilation * (kernel_size // 2)
    pad = (0, 0, 0, 0, reach, reach, reach, reach)
    k, v = F.pad(k, pad), F.pad(v, pad)
    shifts = [(i * dilation, j * dilation) for i in range(-(kernel_size // 2), kernel_size // 2 + 1)
              for j in range(-(kernel_size // 2), kernel_size // 2 + 1)]

    def window(t: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
        return t[:, reach + dy:(dy - reach) or None, reach + dx:(dx - reach) or None]

    logits = torch.stack([(q * window(k, dy, dx)).sum(-1) for dy, dx in shifts], dim=-1)
    attn = (logits * scale).softmax(dim=-1)
    return sum(attn[..., o, None] * window(v, dy, dx) for o, (dy, dx) in enumerate(shifts))


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
    rows (each with the neighbour rows its dilation reaches, whose own results
    are discarded) and ``proj`` runs band by band into the attention output:
    besides the input only that output and one band's buffers are alive.

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
    zoo_variants = {'dilated': ZooVariant.per_stage(attn_dims=(32, 64, 320, 1024))}

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

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, c = x.shape
        if n != hw[0] * hw[1]:
            raise ValueError(f'MultiScaleDilatedAttention: {n} tokens do not form a '
                             f'{hw[0]}x{hw[1]} map')
        x = x.reshape(b, *hw, c)
        if is_exporting():
            return self.proj_drop(self.proj(
                self._forward_export(x).view(b, n, self.attn_dims)))
        out = x.new_empty(b, *hw, self.attn_dims)
        width = self.attn_dims // len(self.dilation)
        if (self.chunk_tokens is None or torch.is_grad_enabled() or n <= self.chunk_tokens
                or is_capturing()):   # a captured graph would unroll the bands
            for g in range(len(self.dilation)):
                self._attend_group(x, g, out[..., g * width:(g + 1) * width])
            return self.proj_drop(self.proj(out.view(b, n, self.attn_dims)))
        rows = max(1, self.chunk_tokens // hw[1])
        for g, dilation in enumerate(self.dilation):
            reach = dilation * (self.kernel_size // 2)
            for top in range(0, hw[0], rows):
                bottom = min(top + rows, hw[0])
                lo, hi = max(0, top - reach), min(hw[0], bottom + reach)
                band = x.new_empty(b, hi - lo, hw[1], width)
                self._attend_group(x[:, lo:hi], g, band)
                out[:, top:bottom, :, g * width:(g + 1) * width] = band[:, top - lo:bottom - lo]
        result = out if self.attn_dims == c else x.new_empty(b, *hw, c)
        for top in range(0, hw[0], rows):
            result[:, top:top + rows] = self.proj_drop(self.proj(out[:, top:top + rows]))
        return result.view(b, n, c)

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
            out=out.unflatten(-1, (-1, self.head_dims)))


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

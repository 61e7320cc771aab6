"""Sliding-window dilated attention (DilateFormer, Jiao et al.,
arXiv:2302.01791) without the official ``nn.Unfold`` copies, and its memory
schedules.

The official model gathers every ``k x k`` neighbourhood with ``nn.Unfold``,
i.e. it materialises ``k * k`` copies of the keys and of the values.  Here the
neighbourhood is visited one offset at a time: for each of the ``k * k``
offsets the overlapping part of the map is a pair of slicing *views* (no
copy, no padding), so the extra memory is one attention map (``k * k`` logits
per head and position) plus one product of the size of the queries.  Samples
outside the map contribute the logit 0 and the value 0, exactly like the zero
padding of the official ``nn.Unfold`` (they are not masked).

Fast paths: ``dilated_attention_backward`` (:class:`DilatedLocalAttention`'s
own backward) and ``dilated_bands`` (:func:`attend_in_row_bands`).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .autograd import eager_autograd, is_capturing
from .registry import register_fast_path

register_fast_path(
    'dilated_attention_backward', "dilated attention's own backward: the offset loop "
    "accumulates into one gradient buffer per input instead of autograd's zero-filled "
    'full-size gradient per slice of every offset', modes=('train', ))
register_fast_path(
    'dilated_bands', 'DilateFormer inference in bands of rows (with the rows each dilation '
    'reaches) and the output projection band by band: only the input, the output and one '
    "band's buffers are alive", modes=('inference', ))


def _overlap(size: int, shift: int) -> tuple[slice, slice]:
    """Slices ``(dst, src)`` with ``src = dst + shift`` inside ``[0, size)``."""
    lo, hi = max(0, -shift), min(size, size - shift)
    return slice(lo, hi), slice(lo + shift, hi + shift)


def _check_kernel(kernel_size: int) -> None:
    if kernel_size % 2 == 0:
        raise ValueError(f'dilated attention needs an odd kernel_size, got {kernel_size}')


def _shifts(kernel_size: int, dilation: int) -> list[tuple[int, int]]:
    """The ``(dy, dx)`` offsets of a dilated ``k x k`` neighbourhood, row-major."""
    _check_kernel(kernel_size)
    radius = kernel_size // 2
    return [(i * dilation, j * dilation)
            for i in range(-radius, radius + 1) for j in range(-radius, radius + 1)]


def _windows(h: int, w: int, kernel_size: int, dilation: int) -> tuple[int, list]:
    """The number of offsets of a dilated ``k x k`` neighbourhood and, for
    each offset with samples inside an ``h x w`` map, ``(offset index,
    destination rows, source rows, destination cols, source cols)``."""
    shifts = _shifts(kernel_size, dilation)
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


class DilatedLocalAttention(torch.autograd.Function):
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
                            dropout_p: float = 0., out: Optional[torch.Tensor] = None,
                            fast: bool = True) -> torch.Tensor:
    """Attention of every position over its dilated ``k x k`` neighbourhood.

    Args:
        q, k, v: ``(B, H, W, heads, head_dim)`` (channels-last, any strides).
        kernel_size: odd neighbourhood side ``k``.
        dilation: spacing of the neighbourhood samples.
        scale: logit scale (``head_dim ** -0.5`` in DilateFormer).
        dropout_p: dropout on the attention weights.
        out: optional ``(B, H, W, heads, head_dim)`` buffer (e.g. a view of a
            larger output) that receives the result; a new one otherwise.
        fast: take :class:`DilatedLocalAttention`'s own backward where its
            gate allows (eager autograd recording, no dropout); the layer's
            ``dilated_attention_backward`` switch.

    Returns:
        ``out``: for position ``p``, ``sum_o softmax_o(scale * q_p . k_{p+o}) v_{p+o}``
        over the offsets ``o`` with ``k_{p+o} = v_{p+o} = 0`` outside the map.
    """
    if fast and dropout_p == 0 and eager_autograd(q, k, v, under_autocast=True):
        result = DilatedLocalAttention.apply(q, k, v, kernel_size, dilation, scale)
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
    shifts = _shifts(kernel_size, dilation)
    reach = dilation * (kernel_size // 2)
    pad = (0, 0, 0, 0, reach, reach, reach, reach)
    k, v = F.pad(k, pad), F.pad(v, pad)

    def window(t: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
        return t[:, reach + dy:(dy - reach) or None, reach + dx:(dx - reach) or None]

    logits = torch.stack([(q * window(k, dy, dx)).sum(-1) for dy, dx in shifts], dim=-1)
    attn = (logits * scale).softmax(dim=-1)
    return sum(attn[..., o, None] * window(v, dy, dx) for o, (dy, dx) in enumerate(shifts))


def attend_in_row_bands(attend: Callable[[torch.Tensor, int, torch.Tensor], None],
                        project: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                        reaches: Sequence[int], attn_dims: int, band_tokens: Optional[int],
                        fast: bool = True) -> torch.Tensor:
    """Local attention of several head groups over a map, then the output
    projection: ``project(concat_g attend_g(x))``.

    Args:
        attend: ``attend(rows, g, out)`` writes head group ``g``'s attention
            over the map rows ``rows`` (B, h, W, C) into ``out`` (B, h, W,
            attn_dims / groups).
        project: the output projection, (..., attn_dims) -> (..., C).
        x: (B, H, W, C) map.
        reaches: per head group, how many rows its neighbourhood reaches.
        attn_dims: channels of the concatenated groups.
        band_tokens: tokens per band; ``None``: no bands.
        fast: where the gate of ``dilated_bands`` allows (no autograd
            recording, no capture, a map of more than ``band_tokens``
            tokens), go in bands of rows, each attended with the neighbour
            rows its group reaches (whose own results are discarded), and
            project band by band into the output.

    Returns:
        (B, H * W, C) tokens.
    """
    b, h, w, c = x.shape
    width = attn_dims // len(reaches)
    out = x.new_empty(b, h, w, attn_dims)
    if (not fast or band_tokens is None or torch.is_grad_enabled() or h * w <= band_tokens
            or is_capturing()):   # a captured graph would unroll the bands
        for g in range(len(reaches)):
            attend(x, g, out[..., g * width:(g + 1) * width])
        return project(out.view(b, h * w, attn_dims))
    rows = max(1, band_tokens // w)
    for g, reach in enumerate(reaches):
        for top in range(0, h, rows):
            bottom = min(top + rows, h)
            lo, hi = max(0, top - reach), min(h, bottom + reach)
            band = x.new_empty(b, hi - lo, w, width)
            attend(x[:, lo:hi], g, band)
            out[:, top:bottom, :, g * width:(g + 1) * width] = band[:, top - lo:bottom - lo]
    result = out if attn_dims == c else x.new_empty(b, h, w, c)
    for top in range(0, h, rows):
        result[:, top:top + rows] = project(out[:, top:top + rows])
    return result.view(b, h * w, c)

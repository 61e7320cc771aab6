"""Deformable convolution v1 (Dai et al., ICCV 2017, arXiv:1703.06211) with
one weight and one offset group, as LIT / LITv2's deformable token merging
uses it.

The plain path is torchvision's DCNv1 operator
(``torch.ops.torchvision.deform_conv2d``, CPU and CUDA): a dispatcher op with
shape functions, so ``torch.compile`` traces it into the graph (mmcv's pybind
kernel is a graph break); its kernels have no bfloat16 (nor CPU float16)
version, so those run it in float32.  Fast path ``gathered_deform_conv``:
:class:`GatheredDeformConv`, the sampling as gathers of pixel rows and one
matrix product with its own backward, in eager training.
"""
from __future__ import annotations

import functools
import importlib

import torch
from torch.autograd.function import once_differentiable

from ..utils.amp import float32_unless_native
from .autograd import eager_autograd
from .registry import register_fast_path


register_fast_path(
    'gathered_deform_conv', 'DCNv1 in eager training as gathers of pixel rows and one matrix '
    'product, its backward scattering with index_add_ (in place of the DCN kernels\' backward)',
    modes=('train', ))


def load_kernels() -> None:
    """Import torchvision, which registers ``torch.ops.torchvision`` (the DCN
    kernels and their shape functions for ``torch.compile``); the layers that
    call them do so when built, so that ``import vattn_mm`` does not pay for
    ``import torchvision`` (~0.6 s)."""
    try:
        importlib.import_module('torchvision')
    except ImportError as err:
        raise ImportError(f'deformable convolution (LITv2\'s token merging) needs torchvision, '
                          f'the release built for torch {torch.__version__}: {err}') from err


def dcn_v1(x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
           stride: int, padding: int) -> torch.Tensor:
    """torchvision's DCNv1 (no modulation mask, one weight and one offset
    group), in the dtypes its kernels have."""
    no_mask = x.new_zeros(x.shape[0], 1)   # what torchvision passes when ``mask=None``
    return torch.ops.torchvision.deform_conv2d(x, weight, offset, no_mask, bias, stride, stride,
                                               padding, padding, 1, 1, 1, 1, False)


#: :func:`dcn_v1` in float32 under autocast and for dtypes its kernels lack
_dcn_v1_any_dtype = float32_unless_native(dcn_v1)


def _bilinear_corners(offset: torch.Tensor, size: tuple[int, int], kernel: tuple[int, int],
                      stride: int, padding: int) -> tuple[list, torch.Tensor, torch.Tensor,
                                                          torch.Tensor, torch.Tensor]:
    """Where DCNv1 samples, as row indices into the (B*H*W, C) table of input
    pixels: for every (b, output y, output x, tap) in that order, the four
    bilinear corners as ``(index, weight, valid)``, plus the fractional parts
    ``ly``, ``lx`` and their complements.  A sample outside ``(-1, H) x (-1,
    W)`` is zero and passes no offset gradient, corners outside the map count
    zero (mmcv's DCN kernels); invalid corners get a clamped index and zero
    weight."""
    b, _, oh, ow = offset.shape
    (h, w), (kh, kw) = size, kernel
    off = offset.view(b, kh * kw, 2, oh, ow).permute(0, 3, 4, 1, 2)   # (B, oh, ow, T, 2)
    arange = functools.partial(torch.arange, dtype=offset.dtype, device=offset.device)
    base_y = (arange(oh) * stride - padding).view(oh, 1, 1) + arange(kh).repeat_interleave(kw)
    base_x = (arange(ow) * stride - padding).view(ow, 1) + arange(kw).repeat(kh)
    py = base_y + off[..., 0]                             # (B, oh, ow, T)
    px = base_x + off[..., 1]
    inside = (py > -1) & (py < h) & (px > -1) & (px < w)
    y0, x0 = py.floor(), px.floor()
    ly, lx = py - y0, px - x0
    hy, hx = 1 - ly, 1 - lx
    batch = torch.arange(b, device=offset.device).view(b, 1, 1, 1) * (h * w)
    corners = []
    for dy, dx, weight in ((0, 0, hy * hx), (0, 1, hy * lx), (1, 0, ly * hx), (1, 1, ly * lx)):
        y, x = (y0 + dy).long(), (x0 + dx).long()
        valid = inside & (y >= 0) & (y < h) & (x >= 0) & (x < w)
        index = batch + y.clamp(0, h - 1) * w + x.clamp(0, w - 1)
        corners.append((index.reshape(-1), (weight * valid).reshape(-1, 1),
                        valid.reshape(-1, 1)))
    return corners, ly.reshape(-1), lx.reshape(-1), hy.reshape(-1), hx.reshape(-1)


def _pixel_rows(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B*H*W, C) (a view for channels-last maps)."""
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


class GatheredDeformConv(torch.autograd.Function):
    """DCNv1 as gathers of pixel rows and one matrix product: the sampled
    columns are ``sum_corner weight * rows[index]`` and the output is
    ``columns @ weight.T + bias``.  Keeps only the input and the offsets; the
    backward recomputes the sampling, scatters the input gradient with
    ``index_add_`` and takes the offset gradient from the corner differences.
    The conventions are mmcv's ``deform_conv2d`` (the official LITv2's);
    torchvision's offset gradient differs for samples exactly at -1, which
    pass none here."""

    @staticmethod
    def forward(ctx, x, offset, weight, bias, stride: int, padding: int):
        ctx.geometry = stride, padding
        ctx.save_for_backward(x, offset, weight)
        b, c, h, w = x.shape
        out_ch, _, kh, kw = weight.shape
        oh, ow = offset.shape[-2:]
        corners = _bilinear_corners(offset, (h, w), (kh, kw), stride, padding)[0]
        rows = _pixel_rows(x)
        columns = sum(rows.index_select(0, index) * weight_ for index, weight_, _ in corners)
        out = torch.addmm(bias, columns.view(-1, kh * kw * c),
                          weight.permute(0, 2, 3, 1).reshape(out_ch, -1).t())
        return out.view(b, oh, ow, out_ch).permute(0, 3, 1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, offset, weight = ctx.saved_tensors
        stride, padding = ctx.geometry
        b, c, h, w = x.shape
        out_ch, _, kh, kw = weight.shape
        oh, ow = offset.shape[-2:]
        corners, ly, lx, hy, hx = _bilinear_corners(offset, (h, w), (kh, kw), stride, padding)
        rows = _pixel_rows(x)
        grad_rows = grad.permute(0, 2, 3, 1).reshape(-1, out_ch)
        weight_rows = weight.permute(0, 2, 3, 1).reshape(out_ch, -1)
        grad_columns = (grad_rows @ weight_rows).view(-1, c)
        columns = torch.zeros_like(grad_columns)
        grad_x = torch.zeros_like(rows) if ctx.needs_input_grad[0] else None
        dots = []
        for index, weight_, valid in corners:
            gathered = rows.index_select(0, index)
            columns.addcmul_(gathered, weight_)
            dots.append((gathered * grad_columns).sum(1) * valid.view(-1))
            if grad_x is not None:
                grad_x.index_add_(0, index, grad_columns * weight_)
        grad_offset = None
        if ctx.needs_input_grad[1]:
            s00, s01, s10, s11 = dots
            grad_y = hx * (s10 - s00) + lx * (s11 - s01)
            grad_xs = hy * (s01 - s00) + ly * (s11 - s10)
            grad_offset = (torch.stack((grad_y, grad_xs), 1).view(b, oh, ow, kh * kw * 2)
                           .permute(0, 3, 1, 2))
        grad_weight = (grad_rows.t() @ columns.view(-1, kh * kw * c)).view(
            out_ch, kh, kw, c).permute(0, 3, 1, 2) if ctx.needs_input_grad[2] else None
        grad_bias = grad_rows.sum(0) if ctx.needs_input_grad[3] else None
        if grad_x is not None:
            grad_x = grad_x.view(b, h, w, c).permute(0, 3, 1, 2)
        return grad_x, grad_offset, grad_weight, grad_bias, None, None


def deform_conv2d(x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor, stride: int, padding: int,
                  fast: bool = True) -> torch.Tensor:
    """DCNv1 with a bias: ``x`` (B, C, H, W) sampled at the kernel taps moved
    by ``offset`` (B, 2 * taps, oh, ow; channel ``2 * t`` the row shift of
    tap ``t``, ``2 * t + 1`` its column shift), bilinear, zero outside the
    map.

    Where ``fast`` (the layer's ``gathered_deform_conv`` switch) and its gate
    allow (eager autograd recording outside autocast, every tensor on ``x``'s
    device and dtype): :class:`GatheredDeformConv`; otherwise torchvision's
    operator."""
    tensors = (x, offset, weight, bias)
    if (fast and all(t.device == x.device and t.dtype == x.dtype for t in tensors)
            and eager_autograd(*tensors)):
        return GatheredDeformConv.apply(x, offset, weight, bias, stride, padding)
    return _dcn_v1_any_dtype(x, offset, weight, bias, stride, padding)

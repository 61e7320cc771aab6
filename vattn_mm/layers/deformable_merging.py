"""Deformable token merging (DTM): the learned downsampling between LITv2
stages (LIT, Pan et al., AAAI 2022, arXiv:2105.14217; LITv2, arXiv:2205.13213).

The DCNv1 sampling is mmcv's ``deform_conv2d`` (what the official code uses).
Eager training on the CPU runs :class:`_GatheredDeformConv` (its backward 5-10x
faster than the CPU kernels'); otherwise torchvision's DCNv1 operator
(``torch.ops.torchvision.deform_conv2d``, CPU and CUDA): a dispatcher op with
shape functions, so ``torch.compile`` traces it into the graph (mmcv's pybind
kernel is a graph break).  For ONNX export the same sampling runs in plain
operators (:func:`~vattn_mm.layers.export_ops.deform_conv2d_sampled`).
"""
from __future__ import annotations

import functools
import importlib
import math

import torch
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.registry import MODELS
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.amp import float32_unless_native
from ..utils.tracing import eager_autograd, is_exporting
from .export_ops import deform_conv2d_sampled
from .patch_embed import Size, map_to_tokens

importlib.import_module('torchvision')   # registers torch.ops.torchvision


def _dcn_v1(x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
            bias: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    """DCNv1 (no modulation mask, one weight and one offset group)."""
    no_mask = x.new_zeros(x.shape[0], 1)   # what torchvision passes when ``mask=None``
    return torch.ops.torchvision.deform_conv2d(x, weight, offset, no_mask, bias, stride, stride,
                                               padding, padding, 1, 1, 1, 1, False)


#: the kernels have no bfloat16 (nor CPU float16) version: under autocast the
#: deformable convolution itself runs in float32
_deform_conv2d = float32_unless_native(_dcn_v1)


def _bilinear_corners(offset: torch.Tensor, size: Size, kernel: Size, stride: int,
                      padding: int) -> tuple[list, torch.Tensor, torch.Tensor, torch.Tensor,
                                             torch.Tensor]:
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


class _GatheredDeformConv(torch.autograd.Function):
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


def _gathered_applies(*tensors: torch.Tensor) -> bool:
    """Eager CPU training (:func:`~vattn_mm.utils.tracing.eager_autograd`) on
    tensors of one dtype."""
    return (all(t.device.type == 'cpu' and t.dtype == tensors[0].dtype for t in tensors)
            and eager_autograd(*tensors))


class BiasedDeformConv2d(nn.Module):
    """Deformable convolution v1 (Dai et al., ICCV 2017, arXiv:1703.06211)
    with a bias, its sampling offsets predicted from the input by
    ``conv_offset``, a plain convolution of the same geometry (mmcv's
    ``DeformConv2dPack`` plus a bias).

    Offset channel ``2 * k`` is the y (row) shift of kernel tap ``k`` and
    ``2 * k + 1`` its x shift; samples are bilinear, zero outside the map.
    ``conv_offset`` starts at zero, i.e. as a plain convolution.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        self.stride, self.padding = stride, padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels,
                                               kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.conv_offset = nn.Conv2d(in_channels, 2 * kernel_size * kernel_size,
                                     kernel_size, stride, padding)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Conv2d``'s initialisation for the kernel and bias, zero offsets."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.weight[0].numel())
        nn.init.uniform_(self.bias, -bound, bound)
        self.init_offset()

    def init_offset(self) -> None:
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offset = self.conv_offset(x)
        if is_exporting():   # the dispatcher op has no ONNX form: the same sampling in plain ops
            out = deform_conv2d_sampled(x.contiguous(), offset, self.weight, self.stride,
                                        self.padding)
            return out + self.bias.view(1, -1, 1, 1)
        if _gathered_applies(x, offset, self.weight, self.bias):
            return _GatheredDeformConv.apply(x, offset, self.weight, self.bias, self.stride,
                                             self.padding)
        return _deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding)


@MODELS.register_module()
class DeformableTokenMerging(nn.Module):
    """``kernel_size`` x ``kernel_size`` stride-``kernel_size`` deformable conv
    (:class:`BiasedDeformConv2d`) -> norm -> activation; takes a (B, C, H, W)
    map and returns tokens (B, N, out_channels) and their size.  Odd sides are
    floored, as by the official DTM.

    Args:
        in_channels / out_channels: channels before / after merging.
        kernel_size: kernel size and stride (2 in LITv2).
        norm_cfg: norm after the convolution (LITv2: BatchNorm).
        act_cfg: activation after the norm (LITv2: GELU).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 2,
                 norm_cfg: dict = dict(type='BN'), act_cfg: dict = dict(type='GELU')):
        super().__init__()
        self.kernel_size = self.stride = kernel_size
        self.dconv = BiasedDeformConv2d(in_channels, out_channels, kernel_size,
                                        stride=kernel_size)
        self.norm = build_norm_layer(norm_cfg, out_channels)[1]
        self.act = build_activation_layer(act_cfg)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        h, w = x.shape[-2:]
        if h < self.kernel_size or w < self.kernel_size:
            raise ValueError(f'DeformableTokenMerging: a {h}x{w} map is smaller than '
                             f'its {self.kernel_size}x{self.kernel_size} kernel; '
                             'the input image is too small')
        return map_to_tokens(self.act(self.norm(self.dconv(x))))

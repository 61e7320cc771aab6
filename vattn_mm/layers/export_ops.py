"""Exact pure-PyTorch forms of operators that have no ONNX form with dynamic
sizes, used while exporting (:func:`~vattn_mm.ops.is_exporting`):

* adaptive average pooling whose input size (AgentAttention's agents,
  PVTv2's linear spatial reduction) or output size (P2T's ``round(side / ratio)`` pyramids) follows the input: the
  ONNX exporter needs both as constants;
* mmcv's deformable convolution (LITv2's token merging): a custom C++/CUDA op
  with no ONNX form, rebuilt from ``grid_sample`` taps.

Eager runs keep the native operators; the tests check both paths equal.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import is_exporting

IntLike = Union[int, torch.Tensor]


def _as_index(value: IntLike) -> torch.Tensor:
    return torch.as_tensor(value, dtype=torch.long)


def _pool_matrix(size: IntLike, out: IntLike, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """``(out, size)`` averaging weights of adaptive pooling along one side:
    bin ``i`` covers ``[floor(i * size / out), ceil((i + 1) * size / out))``,
    as PyTorch's kernel."""
    size, out = _as_index(size).to(device), _as_index(out).to(device)
    bins = torch.arange(out, device=device).unsqueeze(1)
    start = bins * size // out
    end = ((bins + 1) * size + out - 1) // out
    pos = torch.arange(size, device=device).unsqueeze(0)
    inside = (pos >= start) & (pos < end)
    return inside.to(dtype) / (end - start).to(dtype)


def adaptive_avg_pool2d(x: torch.Tensor, size: Sequence[IntLike]) -> torch.Tensor:
    """``F.adaptive_avg_pool2d(x, size)``; while exporting, two matrix
    products with the bin-averaging weights, which stay valid for any input
    and output size (``size`` may be traced sizes)."""
    if not is_exporting():
        return F.adaptive_avg_pool2d(x, tuple(int(s) for s in size))
    h, w = x.shape[-2:]
    rows = _pool_matrix(h, size[0], x.dtype, x.device)
    cols = _pool_matrix(w, size[1], x.dtype, x.device)
    return rows @ x @ cols.transpose(0, 1)


def deform_conv2d_sampled(x: torch.Tensor, offset: torch.Tensor, weight: torch.Tensor,
                          stride: int, padding: int) -> torch.Tensor:
    """Deformable convolution v1 (one offset group, dilation 1, no bias) as
    mmcv's ``deform_conv2d`` computes it, from ``grid_sample``.

    Tap ``t = i * k + j`` of output ``(y, x)`` samples the input at
    ``(y * stride - padding + i + offset[:, 2t], x * stride - padding + j +
    offset[:, 2t + 1])``, bilinearly, corners outside the map counting 0
    (mmcv's ``deformable_im2col_bilinear``; ``grid_sample`` with zero padding
    and ``align_corners=False`` reads pixel ``p`` at ``(2p + 1) / side - 1``).
    """
    b, c, h, w = x.shape
    out_ch, _, kh, kw = weight.shape
    taps = kh * kw
    oh, ow = offset.shape[-2:]
    offset = offset.view(b, taps, 2, oh, ow)
    ys = torch.arange(oh, dtype=x.dtype, device=x.device) * stride - padding
    xs = torch.arange(ow, dtype=x.dtype, device=x.device) * stride - padding
    ti = torch.arange(kh, dtype=x.dtype, device=x.device).repeat_interleave(kw)
    tj = torch.arange(kw, dtype=x.dtype, device=x.device).repeat(kh)
    py = ys.view(1, 1, -1, 1) + ti.view(1, -1, 1, 1) + offset[:, :, 0]   # (B, T, oh, ow)
    px = xs.view(1, 1, 1, -1) + tj.view(1, -1, 1, 1) + offset[:, :, 1]
    grid = torch.stack(((2 * px + 1) / w - 1, (2 * py + 1) / h - 1), dim=-1)
    sampled = F.grid_sample(x, grid.view(b, taps * oh, ow, 2), mode='bilinear',
                            padding_mode='zeros', align_corners=False)  # (B, C, T*oh, ow)
    sampled = sampled.view(b, c * taps, oh * ow)
    return (weight.view(out_ch, c * taps) @ sampled).view(b, out_ch, oh, ow)


class AdaptiveAvgPool2d(nn.AdaptiveAvgPool2d):
    """``nn.AdaptiveAvgPool2d`` through :func:`adaptive_avg_pool2d` (exportable
    with dynamic input sizes); an int or pair ``output_size``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = self.output_size
        return adaptive_avg_pool2d(x, (size, size) if isinstance(size, int) else size)

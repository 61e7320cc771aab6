"""Deformable token merging (DTM): the learned downsampling between LITv2
stages (LIT, Pan et al., AAAI 2022, arXiv:2105.14217; LITv2, arXiv:2205.13213).

The DCNv1 sampling computes mmcv's ``deform_conv2d`` (what the official code
uses): :func:`~vattn_mm.ops.deform_conv.deform_conv2d` (torchvision's
operator, or its gathered form in eager training: fast path
``gathered_deform_conv``).  For ONNX export the same sampling runs in plain
operators (:func:`~vattn_mm.layers.export_ops.deform_conv2d_sampled`).
"""
from __future__ import annotations

import math

import torch
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.registry import MODELS
from torch import nn

from .. import ops
from ..ops.deform_conv import deform_conv2d
from ..utils.tracing import is_exporting
from .export_ops import deform_conv2d_sampled
from .patch_embed import Size, map_to_tokens


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
        self.gathered = ops.switch('gathered_deform_conv')
        ops.deform_conv.load_kernels()
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
        return deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding,
                             fast=self.gathered.on(x))


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
        # the norm runs on a channels-last map, the layout of the token view the
        # gradient arrives in: PyTorch's CPU BatchNorm backward is wrong for a
        # contiguous NCHW batch-1 input with a channels-last output gradient
        y = self.dconv(x).contiguous(memory_format=torch.channels_last)
        return map_to_tokens(self.act(self.norm(y)))

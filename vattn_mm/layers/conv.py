"""Convolutions over maps made from token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .. import ops


class TokenMapConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters and state-dict keys) for maps made
    from tokens: a (B, C, H, W) view of (B, N, C) tokens runs with
    channels-last operands and a channels-last result (fast path
    ``token_map_conv``), large depthwise kernels compute their weight
    gradient as a convolution (``depthwise_weight_grad``) and
    :meth:`forward_act` fuses an activation in CPU inference (``fused_act``);
    see :mod:`vattn_mm.ops.conv`.  The output is ``nn.Conv2d``'s (up to float
    rounding) either way.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_map_conv = ops.switch('token_map_conv')
        self.depthwise_weight_grad = ops.switch('depthwise_weight_grad')
        self.fused_act = ops.switch('fused_act')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.token_map_conv(self, x)

    def forward_act(self, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
        """``act(self(x))``."""
        return ops.token_map_conv_act(self, x, act)


class DepthwiseConv2d(TokenMapConv2d):
    """Depthwise ``k x k`` :class:`TokenMapConv2d` (``groups == channels``),
    "same" padding by default."""

    def __init__(self, channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, dilation: int = 1, bias: bool = True):
        if padding is None:
            padding = dilation * (kernel_size - 1) // 2
        super().__init__(channels, channels, kernel_size, stride, padding, dilation,
                         groups=channels, bias=bias)

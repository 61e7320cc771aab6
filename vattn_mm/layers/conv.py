"""Convolutions over maps made from token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..utils.tracing import is_exporting
from .fused import conv_act


def is_token_map(x: torch.Tensor) -> bool:
    """Whether a (B, C, H, W) map keeps its channels innermost in memory, as
    :func:`~vattn_mm.layers.tokens_to_map` views of (B, N, C) tokens do."""
    return x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1


#: largest depthwise kernel for which the channels-last kernel is the faster
#: one (oneDNN, measured on the CPU: 5-25x faster at k=3, 1.1-2.4x at k=11,
#: slower at k=13)
CHANNELS_LAST_MAX_DEPTHWISE_KERNEL = 11


class TokenMapConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters and state-dict keys) with a fast path
    for maps made from tokens.

    A (B, C, H, W) map viewed from (B, N, C) tokens keeps its channels
    innermost in memory (:func:`is_token_map`).  For it this layer runs the
    channels-last kernel, with the weight passed channels-last too (for a
    depthwise weight a strided view, see :func:`_channels_last_weight`).
    PyTorch's own choice follows the strides of input and weight and can fall
    to the NCHW kernel: it first copies the map to NCHW (a transposing copy as
    slow as the convolution) and returns NCHW, which the next token-wise
    layer copies back.  Depthwise kernels above
    :data:`CHANNELS_LAST_MAX_DEPTHWISE_KERNEL` run NCHW on purpose (one copy;
    oneDNN's channels-last kernel is slower there); NCHW inputs (images) and
    1x1 kernels take the plain path.  The output is the same either way (up
    to float rounding).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        depthwise = self.groups == self.in_channels == self.out_channels
        kernel = max(self.kernel_size)
        large_depthwise = depthwise and kernel > CHANNELS_LAST_MAX_DEPTHWISE_KERNEL
        self.channels_last = kernel > 1 and not large_depthwise
        self.nchw = large_depthwise

    def _operands(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The input and weight the convolution runs on: for a token map both
        channels-last on the fast path, the map copied to NCHW for a large
        depthwise kernel; otherwise (and when exporting: the layout is
        the runtime's business) as they are."""
        if is_token_map(x) and not is_exporting():
            if self.channels_last:
                return (x.contiguous(memory_format=torch.channels_last),
                        _channels_last_weight(self.weight))
            if self.nchw:
                return x.contiguous(), self.weight
        return x, self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(*self._operands(x), self.bias)

    def forward_act(self, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
        """``act(self(x))``; in CPU inference one oneDNN call where it can
        (:func:`~vattn_mm.layers.fused.conv_act`)."""
        return conv_act(x, self, act, self._operands)


class DepthwiseConv2d(TokenMapConv2d):
    """Depthwise ``k x k`` :class:`TokenMapConv2d` (``groups == channels``),
    "same" padding by default."""

    def __init__(self, channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, dilation: int = 1, bias: bool = True):
        if padding is None:
            padding = dilation * (kernel_size - 1) // 2
        super().__init__(channels, channels, kernel_size, stride, padding, dilation,
                         groups=channels, bias=bias)


def _channels_last_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight with channels-last strides.  A (C, 1, k, k) depthwise weight
    gets a view (same memory, its input-channel dim has size 1): there
    ``.contiguous(channels_last)`` keeps the NCHW strides, which it accepts as
    channels-last already, and PyTorch would still pick the NCHW kernel."""
    if weight.shape[1] != 1:
        return weight.contiguous(memory_format=torch.channels_last)
    _, _, kh, kw = weight.shape
    if not weight.is_contiguous():
        weight = weight.contiguous()
    return weight.as_strided(weight.shape, (kh * kw, 1, kw, 1))

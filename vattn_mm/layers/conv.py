"""Convolutions over maps made from token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


def is_token_map(x: torch.Tensor) -> bool:
    """Whether a (B, C, H, W) map keeps its channels innermost in memory, as
    :func:`~vattn_mm.layers.tokens_to_map` views of (B, N, C) tokens do."""
    return x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1


#: largest kernel for which the channels-last kernel is the faster one (oneDNN,
#: measured on the CPU: 5-25x faster at k=3, 1.1-2.4x at k=11, slower at k=13)
CHANNELS_LAST_MAX_KERNEL = 11


class DepthwiseConv2d(nn.Conv2d):
    """Depthwise ``k x k`` convolution (``groups == channels``), an
    ``nn.Conv2d`` with the same parameters and state-dict keys.

    Fast path: a map whose channels are innermost in memory (a view of tokens,
    see :func:`is_token_map`) is convolved channels-last, with the weight
    passed channels-last too, for kernels up to :data:`CHANNELS_LAST_MAX_KERNEL`.
    PyTorch otherwise picks the NCHW kernel for such a map: it first copies the
    map to NCHW (a transposing copy as slow as the convolution) and returns
    NCHW, which the next token-wise layer copies back.  Other maps and larger
    kernels take the plain ``nn.Conv2d`` path.  The output is the same either
    way (up to float rounding).
    """

    def __init__(self, channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, dilation: int = 1, bias: bool = True):
        if padding is None:
            padding = dilation * (kernel_size - 1) // 2
        super().__init__(channels, channels, kernel_size, stride, padding, dilation,
                         groups=channels, bias=bias)
        self.channels_last = max(self.kernel_size) <= CHANNELS_LAST_MAX_KERNEL

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.channels_last and is_token_map(x)):
            return super().forward(x)
        x = x.contiguous(memory_format=torch.channels_last)
        return self._conv_forward(x, _channels_last_view(self.weight), self.bias)


def _channels_last_view(weight: torch.Tensor) -> torch.Tensor:
    """The (C, 1, k, k) depthwise weight with channels-last strides: the same
    memory (its input-channel dim has size 1) but strides that make PyTorch
    choose the channels-last kernel, which ``.contiguous(channels_last)`` does
    not give (it accepts the NCHW strides as channels-last already)."""
    c, _, kh, kw = weight.shape
    if not weight.is_contiguous():
        weight = weight.contiguous()
    return weight.as_strided(weight.shape, (kh * kw, 1, kw, 1))

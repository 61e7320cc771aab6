"""Convolutions over maps made from token sequences."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import eager_autograd, is_exporting
from .fused import conv_act

_ATEN = torch.ops.aten


def is_token_map(x: torch.Tensor) -> bool:
    """Whether a (B, C, H, W) map keeps its channels innermost in memory, as
    :func:`~vattn_mm.layers.tokens_to_map` views of (B, N, C) tokens do."""
    return x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1


#: largest depthwise kernel for which the channels-last kernel is the faster
#: one (oneDNN, measured on the CPU: 5-25x faster at k=3, 1.1-2.4x at k=11,
#: slower at k=13)
CHANNELS_LAST_MAX_DEPTHWISE_KERNEL = 11

#: smallest depthwise kernel whose weight gradient :func:`conv_backward`
#: computes as a convolution (:func:`depthwise_weight_grad`): oneDNN's own
#: depthwise weight gradient is faster at 3x3 and 1-50x slower from 5x5 on
#: (measured on the CPU at FocalNet's and PVTv2's map sizes)
DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL = 5


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
        kernel = max(self.kernel_size)
        large_depthwise = self.depthwise and kernel > CHANNELS_LAST_MAX_DEPTHWISE_KERNEL
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
        if self.own_weight_grad and eager_autograd(x, *self.parameters()):
            return _TokenMapConv.apply(x, self.weight, self.bias, self)
        return self._conv_forward(*self._operands(x), self.bias)

    @property
    def depthwise(self) -> bool:
        """Whether every channel is convolved on its own (``groups`` equal
        to the input and output channels)."""
        return self.groups == self.in_channels == self.out_channels

    @property
    def own_weight_grad(self) -> bool:
        """Whether :func:`conv_backward` computes this layer's weight
        gradient itself (:func:`depthwise_weight_grad`)."""
        return (self.depthwise and self.padding_mode == 'zeros'
                and not isinstance(self.padding, str)
                and max(self.kernel_size) >= DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL)

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


def depthwise_weight_grad(grad: torch.Tensor, x: torch.Tensor,
                          conv: nn.Conv2d) -> torch.Tensor:
    """The weight gradient of depthwise ``conv`` at input ``x`` and output
    gradient ``grad`` (of all its channels or of a slice): per channel, the
    correlation of the input with the output gradient, which is itself a
    depthwise convolution of ``x`` with ``grad`` as the kernel (stride and
    dilation trade places; the result is cut to the kernel size).  One per
    sample, summed.

    The input is zero-padded beforehand and the convolution runs unpadded:
    for a padded convolution with a kernel as large as the map, oneDNN builds
    a primitive that holds hundreds of MiB (FocalNet-T at 512x512: 480 MiB
    over its four stages) and keeps it in its primitive cache for the life
    of the process; the unpadded one holds a few."""
    kh, kw = conv.kernel_size
    ph, pw = conv.padding
    if ph or pw:
        x = F.pad(x, (pw, pw, ph, ph))
    total = None
    for b in range(x.shape[0]):
        corr = F.conv2d(x[b:b + 1], grad[b].unsqueeze(1), None, conv.dilation, 0,
                        conv.stride, x.shape[1])[0, :, :kh, :kw]
        total = corr if total is None else total + corr
    return total.unsqueeze(1).contiguous()


def conv_backward(conv: TokenMapConv2d, grad: torch.Tensor, x: torch.Tensor,
                  weight: torch.Tensor, needs: tuple[bool, bool, bool]) -> tuple:
    """``(grad input, grad weight, grad bias)`` of ``conv`` (``None`` where
    ``needs`` says no) at its operands ``x``, ``weight``
    (:meth:`TokenMapConv2d._operands`): aten's convolution backward, with
    the weight gradient from :func:`depthwise_weight_grad` where the layer
    says so (:attr:`TokenMapConv2d.own_weight_grad`).  A depthwise ``conv``
    may be given a slice of its channels (``x`` and ``weight`` of those
    channels only)."""
    own = conv.own_weight_grad and needs[1]
    channels = weight.shape[0]
    groups = channels if conv.depthwise else conv.groups
    grad_in, grad_w, grad_b = _ATEN.convolution_backward(
        grad, x, weight, None if conv.bias is None else [channels], conv.stride,
        conv.padding, conv.dilation, False, [0, 0], groups,
        [needs[0], needs[1] and not own, needs[2]])
    if own:
        grad_w = depthwise_weight_grad(grad, x, conv)
    return grad_in, None if grad_w is None else grad_w.contiguous(), grad_b


class _TokenMapConv(torch.autograd.Function):
    """:class:`TokenMapConv2d`'s forward with :func:`conv_backward`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                conv: TokenMapConv2d) -> torch.Tensor:
        x, weight_op = conv._operands(x)
        ctx.conv = conv
        ctx.save_for_backward(x, weight_op)
        return F.conv2d(x, weight_op, bias, conv.stride, conv.padding, conv.dilation,
                        conv.groups)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_in, grad_w, grad_b = conv_backward(ctx.conv, grad, x, weight,
                                                tuple(ctx.needs_input_grad[:3]))
        return grad_in, grad_w, grad_b, None


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

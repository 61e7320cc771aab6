"""Convolutions over maps made from token sequences: the channels-last
operand choice and the depthwise weight gradient as a convolution.

A (B, C, H, W) map viewed from (B, N, C) tokens keeps its channels innermost
in memory (:func:`is_token_map`).  PyTorch's own kernel choice follows the
strides of input and weight and can fall to the NCHW kernel: it first copies
the map to NCHW (a transposing copy as slow as the convolution) and returns
NCHW, which the next token-wise layer copies back.  Path ``token_map_conv``
runs such maps channels-last, the weight passed channels-last too (for a
depthwise weight a strided view, :func:`channels_last_weight`); depthwise
kernels above :data:`CHANNELS_LAST_MAX_DEPTHWISE_KERNEL` run NCHW on purpose
(one copy; oneDNN's channels-last kernel is slower there); NCHW inputs
(images) and 1x1 kernels keep their layout.  The output is the same either
way (up to float rounding).

Path ``depthwise_weight_grad``: the backward of depthwise kernels from
:data:`DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL` on computes the weight gradient as
a convolution (:func:`depthwise_weight_grad`), faster than oneDNN's own
there (docs/benchmarks.md, "Fast paths").

The functions take the convolution module (``conv``, a
:class:`~vattn_mm.layers.TokenMapConv2d`), which holds the switch of each
path under the path's name.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import eager_autograd, is_exporting
from .fused import conv_act
from .registry import register_fast_path

register_fast_path('token_map_conv', 'convolutions over token maps with channels-last '
                   'operands: no NCHW copy of the map in and out')
register_fast_path('depthwise_weight_grad', 'depthwise weight gradient (kernels >= 5) '
                   "computed as a convolution, faster than oneDNN's own", modes=('train', ))

_ATEN = torch.ops.aten

#: largest depthwise kernel for which the channels-last kernel is the faster
#: one (oneDNN on the CPU; docs/benchmarks.md)
CHANNELS_LAST_MAX_DEPTHWISE_KERNEL = 11

#: smallest depthwise kernel whose weight gradient :func:`conv_backward`
#: computes as a convolution: oneDNN's own depthwise weight gradient is the
#: faster one at 3x3 and slower from 5x5 on (docs/benchmarks.md)
DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL = 5


def is_token_map(x: torch.Tensor) -> bool:
    """Whether a (B, C, H, W) map keeps its channels innermost in memory, as
    :func:`~vattn_mm.layers.tokens_to_map` views of (B, N, C) tokens do."""
    return x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1


def is_depthwise(conv: nn.Conv2d) -> bool:
    """Whether every channel is convolved on its own (``groups`` equal to
    the input and output channels)."""
    return conv.groups == conv.in_channels == conv.out_channels


def token_map_layout(conv: nn.Conv2d) -> Optional[torch.memory_format]:
    """The layout ``conv`` runs a token map in: ``torch.channels_last``,
    ``torch.contiguous_format`` (NCHW, depthwise kernels above
    :data:`CHANNELS_LAST_MAX_DEPTHWISE_KERNEL`) or ``None`` (1x1 kernels:
    as it comes)."""
    kernel = max(conv.kernel_size)
    if kernel == 1:
        return None
    if is_depthwise(conv) and kernel > CHANNELS_LAST_MAX_DEPTHWISE_KERNEL:
        return torch.contiguous_format
    return torch.channels_last


def channels_last_weight(weight: torch.Tensor) -> torch.Tensor:
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


def conv_operands(conv: nn.Conv2d, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The input and weight ``conv`` runs on: for a token map in the layout
    of :func:`token_map_layout` where ``token_map_conv`` is on; otherwise (and
    when exporting: the layout is the runtime's business) as they are."""
    if conv.token_map_conv.on(x) and is_token_map(x) and not is_exporting():
        layout = token_map_layout(conv)
        if layout is torch.channels_last:
            return x.contiguous(memory_format=layout), channels_last_weight(conv.weight)
        if layout is torch.contiguous_format:
            return x.contiguous(), conv.weight
    return x, conv.weight


def owns_weight_grad(conv: nn.Conv2d, x: torch.Tensor) -> bool:
    """Whether :func:`conv_backward` computes ``conv``'s weight gradient at
    input ``x`` itself (:func:`depthwise_weight_grad`)."""
    return (conv.depthwise_weight_grad.on(x) and is_depthwise(conv) and conv.padding_mode == 'zeros'
            and not isinstance(conv.padding, str)
            and max(conv.kernel_size) >= DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL)


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
    a primitive of hundreds of MiB and keeps it in its primitive cache for the
    life of the process (docs/benchmarks.md); the unpadded one holds a few."""
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


def conv_backward(conv: nn.Conv2d, grad: torch.Tensor, x: torch.Tensor,
                  weight: torch.Tensor, needs: tuple[bool, bool, bool]) -> tuple:
    """``(grad input, grad weight, grad bias)`` of ``conv`` (``None`` where
    ``needs`` says no) at its operands ``x``, ``weight``
    (:func:`conv_operands`): aten's convolution backward, with the weight
    gradient from :func:`depthwise_weight_grad` where
    :func:`owns_weight_grad`.  A depthwise ``conv`` may be given a slice of
    its channels (``x`` and ``weight`` of those channels only)."""
    own = needs[1] and owns_weight_grad(conv, x)
    channels = weight.shape[0]
    groups = channels if is_depthwise(conv) else conv.groups
    grad_in, grad_w, grad_b = _ATEN.convolution_backward(
        grad, x, weight, None if conv.bias is None else [channels], conv.stride,
        conv.padding, conv.dilation, False, [0, 0], groups,
        [needs[0], needs[1] and not own, needs[2]])
    if own:
        grad_w = depthwise_weight_grad(grad, x, conv)
    return grad_in, None if grad_w is None else grad_w.contiguous(), grad_b


class TokenMapConvFunction(torch.autograd.Function):
    """A convolution on :func:`conv_operands` with :func:`conv_backward`."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                conv: nn.Conv2d) -> torch.Tensor:
        x, weight_op = conv_operands(conv, x)
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


def token_map_conv(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` on :func:`conv_operands`, through
    :class:`TokenMapConvFunction` in eager training where
    :func:`owns_weight_grad`."""
    if owns_weight_grad(conv, x) and eager_autograd(x, *conv.parameters()):
        return TokenMapConvFunction.apply(x, conv.weight, conv.bias, conv)
    return conv._conv_forward(*conv_operands(conv, x), conv.bias)


def token_map_conv_act(conv: nn.Conv2d, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
    """``act(conv(x))``, one fused call on :func:`conv_operands` where
    ``conv``'s ``fused_act`` switch and :func:`~vattn_mm.ops.fused.can_fuse`
    allow."""
    return conv_act(x, conv, act, conv.fused_act, conv_operands)

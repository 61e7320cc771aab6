"""Convolutions over maps made from token sequences: the channels-last
operand choice, the depthwise weight gradient as a convolution, and the
ConvFFN over groups of hidden channels.

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

The module is :class:`TokenMapConv2d` (and :class:`DepthwiseConv2d`): an
``nn.Conv2d`` holding the switch of each path under the path's name.

Path ``ffn_hidden_groups``, :func:`conv_ffn_in_hidden_groups`: a ConvFFN in
training, ``fc1 -> pre_act -> dwconv -> act -> fc2`` over a slice of the
hidden channels at a time (exact: the activations and the depthwise conv act
per channel, ``fc2`` sums over the groups), so that no hidden-width map is
larger than :data:`HIDDEN_GROUP_BYTES`.  Freed memory is then reused: glibc
gives every block over 32 MiB fresh pages from the kernel and returns them on
``free`` (P2T's and PVTv2's first-stage hidden map is larger at detection
sizes), and touching fresh pages costs more than an elementwise pass over
them.  Only the ``fc1`` and ``dwconv`` outputs of each group are kept for the
backward; the activations are recomputed there.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from .activations import act_grad
from .autograd import (Switch, can_recompute, eager_autograd, is_exporting, recomputes_act,
                       switch)
from .fused import conv_act
from .registry import register_fast_path

register_fast_path('token_map_conv', 'convolutions over token maps with channels-last '
                   'operands: no NCHW copy of the map in and out')
register_fast_path('depthwise_weight_grad', 'depthwise weight gradient (kernels >= 5) '
                   "computed as a convolution, faster than oneDNN's own", modes=('train', ))
register_fast_path('ffn_hidden_groups', 'ConvFFN training over groups of hidden channels: '
                   'no hidden map above HIDDEN_GROUP_BYTES, activations recomputed',
                   modes=('train', ))

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
    if torch.is_grad_enabled():   # the fused kernels have no backward
        return act(conv(x))
    return conv_act(x, conv, act, conv.fused_act, conv_operands)


class TokenMapConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters and state-dict keys) for maps made
    from tokens: a (B, C, H, W) view of (B, N, C) tokens runs with
    channels-last operands and a channels-last result (fast path
    ``token_map_conv``), large depthwise kernels compute their weight
    gradient as a convolution (``depthwise_weight_grad``) and
    :meth:`forward_act` fuses an activation in CPU inference (``fused_act``).
    The output is ``nn.Conv2d``'s (up to float
    rounding) either way.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_map_conv = switch('token_map_conv')
        self.depthwise_weight_grad = switch('depthwise_weight_grad')
        self.fused_act = switch('fused_act')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return token_map_conv(self, x)

    def forward_act(self, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
        """``act(self(x))``."""
        return token_map_conv_act(self, x, act)


class DepthwiseConv2d(TokenMapConv2d):
    """Depthwise ``k x k`` :class:`TokenMapConv2d` (``groups == channels``),
    "same" padding by default."""

    def __init__(self, channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, dilation: int = 1, bias: bool = True):
        if padding is None:
            padding = dilation * (kernel_size - 1) // 2
        super().__init__(channels, channels, kernel_size, stride, padding, dilation,
                         groups=channels, bias=bias)


#: bytes of the largest hidden-width map one channel group makes
HIDDEN_GROUP_BYTES = 8 << 20
_MIN_GROUP_CHANNELS = 16


def hidden_groups(tokens: int, hidden: int, itemsize: int, budget: int) -> list[slice]:
    """The fewest slices of ``hidden`` channels, their widths differing by one
    at most, such that a ``tokens x width`` map takes at most ``budget`` bytes
    (but at least :data:`_MIN_GROUP_CHANNELS` channels wide)."""
    width = max(_MIN_GROUP_CHANNELS, budget // max(1, tokens * itemsize))
    count = -(-hidden // width)
    base, wider = divmod(hidden, count)
    bounds = [0]
    for i in range(count):
        bounds.append(bounds[-1] + base + (i < wider))
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


class ConvFFNParts(NamedTuple):
    """What the grouped path reads of a ConvFFN
    (:class:`~vattn_mm.layers.ConvFFN`): ``fc1 -> pre_act -> dwconv -> act ->
    drop -> fc2``."""

    fc1: nn.Module
    pre_act: nn.Module
    dwconv: nn.Module
    act: nn.Module
    fc2: nn.Module
    drop: nn.Module


def hidden_groups_apply(parts: ConvFFNParts, x: torch.Tensor, switch: Switch) -> bool:
    """Whether :func:`conv_ffn_in_hidden_groups` may stand in for ``parts``
    on tokens ``x``: ``switch`` on for ``x``, plain ``nn.Linear`` projections,
    a stride-1 channels-last depthwise :class:`TokenMapConv2d`, activations
    with a listed gradient (:data:`~vattn_mm.ops.activations.ACTIVATIONS`, or
    no ``pre_act``), no active dropout, no hooks and eager autograd
    (:func:`~vattn_mm.ops.autograd.recomputes_act`)."""
    conv, inner = parts.dwconv, (parts.fc1, parts.dwconv, parts.pre_act)
    return (switch.on(x) and x.dim() == 3 and type(parts.fc1) is nn.Linear
            and isinstance(conv, TokenMapConv2d) and is_depthwise(conv)
            and token_map_layout(conv) is torch.channels_last and conv.stride == (1, 1)
            and conv.padding_mode == 'zeros' and not isinstance(conv.padding, str)
            and (type(parts.pre_act) is nn.Identity or can_recompute(x, parts.pre_act, *inner))
            and can_recompute(x, parts.act, *inner)
            and recomputes_act(x, parts.act, parts.fc2, parts.drop))


class HiddenGroupsConvFFN(torch.autograd.Function):
    """ConvFFN over groups of hidden channels; keeps the input and each
    group's ``fc1`` and ``dwconv`` outputs, recomputes the activations."""

    @staticmethod
    def forward(ctx, x, w1, b1, wd, bd, w2, b2, ffn: ConvFFNParts, hw: tuple[int, int]):
        flat = x.reshape(-1, x.shape[-1])
        groups = hidden_groups(flat.shape[0], w1.shape[0], x.element_size(), HIDDEN_GROUP_BYTES)
        out, kept = None, []
        for g in groups:
            h1 = F.linear(flat, w1[g], None if b1 is None else b1[g])
            h2 = _dwconv(ffn, ffn.pre_act(h1), wd[g], None if bd is None else bd[g],
                         x.shape[0], hw)
            a2 = ffn.act(h2)
            if out is None:
                out = F.linear(a2, w2[:, g], b2)
            else:
                out.addmm_(a2, w2[:, g].t())
            kept += [h1, h2]
        ctx.ffn, ctx.hw, ctx.groups = ffn, hw, groups
        ctx.save_for_backward(x, w1, wd, w2, *kept)
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        x, w1, wd, w2, *kept = ctx.saved_tensors
        ffn, hw = ctx.ffn, ctx.hw
        need_x, need_w1, need_b1, need_wd, need_bd, need_w2, need_b2 = ctx.needs_input_grad[:7]
        need_h1 = need_x or need_w1 or need_b1
        flat, go = x.reshape(-1, x.shape[-1]), grad.reshape(-1, grad.shape[-1])
        gx = torch.zeros_like(flat) if need_x else None
        gw1 = torch.empty_like(w1) if need_w1 else None
        gb1 = w1.new_empty(w1.shape[0]) if need_b1 else None
        gwd = torch.empty_like(wd) if need_wd else None
        gbd = wd.new_empty(wd.shape[0]) if need_bd else None
        gw2 = w2.new_empty(w2.shape[1], w2.shape[0]) if need_w2 else None   # transposed
        gb2 = go.sum(0) if need_b2 else None
        for g, h1, h2 in zip(ctx.groups, kept[0::2], kept[1::2]):
            buf = ffn.act(h2)    # one group-wide buffer: act(h2), its gradient, h2's
            if need_w2:
                torch.mm(buf.t(), go, out=gw2[g])
            if not (need_h1 or need_wd or need_bd):
                continue
            torch.mm(go, w2[:, g], out=buf)
            grad_h2 = act_grad(ffn.act, buf, h2, out=buf)
            grad_a1, grad_wd, grad_bd = _dwconv_backward(
                ffn, grad_h2, ffn.pre_act(h1), wd[g], x.shape[0], hw, (need_h1, need_wd, need_bd))
            if need_wd:
                gwd[g] = grad_wd
            if need_bd:
                gbd[g] = grad_bd
            if not need_h1:
                continue
            grad_h1 = (grad_a1 if type(ffn.pre_act) is nn.Identity
                       else act_grad(ffn.pre_act, grad_a1, h1, out=grad_a1))
            if need_w1:
                torch.mm(grad_h1.t(), flat, out=gw1[g])
            if need_b1:
                torch.sum(grad_h1, 0, out=gb1[g])
            if need_x:
                gx.addmm_(grad_h1, w1[g])
        return (None if gx is None else gx.view_as(x), gw1, gb1, gwd, gbd,
                None if gw2 is None else gw2.t().contiguous(), gb2, None, None)


def conv_ffn_in_hidden_groups(parts: ConvFFNParts, x: torch.Tensor,
                              hw: tuple[int, int]) -> torch.Tensor:
    """The ConvFFN of ``parts`` on tokens ``x`` of a map ``hw``, over groups
    of hidden channels (:class:`HiddenGroupsConvFFN`); where
    :func:`hidden_groups_apply`."""
    return HiddenGroupsConvFFN.apply(x, parts.fc1.weight, parts.fc1.bias, parts.dwconv.weight,
                                     parts.dwconv.bias, parts.fc2.weight, parts.fc2.bias,
                                     parts, hw)


def _as_map(tokens: torch.Tensor, batch: int, hw: tuple[int, int]) -> torch.Tensor:
    """(B * N, C) tokens -> (B, C, H, W) channels-last view."""
    return tokens.view(batch, *hw, tokens.shape[-1]).permute(0, 3, 1, 2)


def _as_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) map -> (B * N, C) tokens."""
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


def _dwconv(ffn: ConvFFNParts, x: torch.Tensor, weight: torch.Tensor,
            bias: Optional[torch.Tensor], batch: int, hw: tuple[int, int]) -> torch.Tensor:
    """``ffn.dwconv`` restricted to the channels of ``weight``, on tokens."""
    conv = ffn.dwconv
    out = F.conv2d(_as_map(x, batch, hw), channels_last_weight(weight), bias, conv.stride,
                   conv.padding, conv.dilation, weight.shape[0])
    return _as_tokens(out)


def _dwconv_backward(ffn: ConvFFNParts, grad: torch.Tensor, x: torch.Tensor,
                     weight: torch.Tensor, batch: int, hw: tuple[int, int],
                     needs: tuple[bool, bool, bool]) -> tuple:
    """:func:`conv_backward` of :func:`_dwconv`."""
    grad_in, grad_w, grad_b = conv_backward(ffn.dwconv, _as_map(grad, batch, hw),
                                            _as_map(x, batch, hw),
                                            channels_last_weight(weight), needs)
    return None if grad_in is None else _as_tokens(grad_in), grad_w, grad_b

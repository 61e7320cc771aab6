"""Feed-forward networks: ConvFFN training over groups of hidden channels
(path ``ffn_hidden_groups``) and MLP inference in chunks of tokens (path
``mlp_inference_chunks``).

ConvFFN over groups of hidden channels: one autograd function runs
``fc1 -> pre_act -> dwconv -> act -> fc2`` on a slice of the hidden channels
at a time (exact: the activations and the depthwise conv act per channel,
``fc2`` sums over the groups), so that no hidden-width map is larger than
:data:`HIDDEN_GROUP_BYTES`.  Freed memory is then reused: glibc gives every
block over 32 MiB fresh pages from the kernel and returns them on ``free``
(P2T's and PVTv2's first-stage hidden map is larger at detection sizes), and
touching fresh pages costs more than an elementwise pass over them.  Only the
``fc1`` and ``dwconv`` outputs of each group are kept for the backward; the
activations are recomputed there.  The depthwise convolutions run
channels-last.

MLP inference in chunks: without autograd, long sequences run
``chunk_tokens`` tokens at a time, so the hidden activation never exists for
the whole map; every token's result is the same as unchunked.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import is_capturing
from .activations import act_grad
from .conv import channels_last_weight, conv_backward, is_depthwise, token_map_layout
from .recompute import can_recompute, recomputes_act
from .registry import Switch, register_fast_path

register_fast_path('ffn_hidden_groups', 'ConvFFN training over groups of hidden channels: '
                   'no hidden map above HIDDEN_GROUP_BYTES, activations recomputed',
                   modes=('train', ))
register_fast_path('mlp_inference_chunks', 'MLP inference over chunks of tokens: the hidden '
                   'activation never exists for the whole map',
                   modes=('inference', ))

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


def hidden_groups_apply(ffn: nn.Module, x: torch.Tensor) -> bool:
    """Whether the grouped training path stands in for ConvFFN ``ffn``'s
    modules: its ``ffn_hidden_groups`` switch on for ``x``, plain
    ``nn.Linear`` projections, a stride-1 channels-last depthwise
    :class:`~vattn_mm.layers.DepthwiseConv2d`, activations with a listed
    gradient (:data:`~vattn_mm.ops.activations.ACTIVATIONS`, or no ``pre_act``),
    no active dropout, no hooks and eager autograd
    (:func:`~vattn_mm.ops.recompute.recomputes_act`)."""
    conv, parts = ffn.dwconv, (ffn.fc1, ffn.dwconv, ffn.pre_act)
    return (ffn.ffn_hidden_groups.on(x) and x.dim() == 3 and type(ffn.fc1) is nn.Linear
            and hasattr(conv, 'depthwise_weight_grad') and is_depthwise(conv)
            and token_map_layout(conv) is torch.channels_last and conv.stride == (1, 1)
            and conv.padding_mode == 'zeros' and not isinstance(conv.padding, str)
            and (type(ffn.pre_act) is nn.Identity or can_recompute(x, ffn.pre_act, *parts))
            and can_recompute(x, ffn.act, *parts)
            and recomputes_act(x, ffn.act, ffn.fc2, ffn.drop))


class HiddenGroupsConvFFN(torch.autograd.Function):
    """ConvFFN over groups of hidden channels; keeps the input and each
    group's ``fc1`` and ``dwconv`` outputs, recomputes the activations."""

    @staticmethod
    def forward(ctx, x, w1, b1, wd, bd, w2, b2, ffn: nn.Module, hw: tuple[int, int]):
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


def in_hidden_groups(ffn: nn.Module, x: torch.Tensor, hw: tuple[int, int],
                     ungrouped: Callable[[torch.Tensor, tuple[int, int]], torch.Tensor]
                     ) -> torch.Tensor:
    """ConvFFN ``ffn`` on tokens ``x``: through :class:`HiddenGroupsConvFFN`
    where :func:`hidden_groups_apply`, else ``ungrouped(x, hw)``."""
    if not hidden_groups_apply(ffn, x):
        return ungrouped(x, hw)
    return HiddenGroupsConvFFN.apply(x, ffn.fc1.weight, ffn.fc1.bias, ffn.dwconv.weight,
                                     ffn.dwconv.bias, ffn.fc2.weight, ffn.fc2.bias, ffn, hw)


def _as_map(tokens: torch.Tensor, batch: int, hw: tuple[int, int]) -> torch.Tensor:
    """(B * N, C) tokens -> (B, C, H, W) channels-last view."""
    return tokens.view(batch, *hw, tokens.shape[-1]).permute(0, 3, 1, 2)


def _as_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) map -> (B * N, C) tokens."""
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


def _dwconv(ffn: nn.Module, x: torch.Tensor, weight: torch.Tensor,
            bias: Optional[torch.Tensor], batch: int, hw: tuple[int, int]) -> torch.Tensor:
    """``ffn.dwconv`` restricted to the channels of ``weight``, on tokens."""
    conv = ffn.dwconv
    out = F.conv2d(_as_map(x, batch, hw), channels_last_weight(weight), bias, conv.stride,
                   conv.padding, conv.dilation, weight.shape[0])
    return _as_tokens(out)


def _dwconv_backward(ffn: nn.Module, grad: torch.Tensor, x: torch.Tensor,
                     weight: torch.Tensor, batch: int, hw: tuple[int, int],
                     needs: tuple[bool, bool, bool]) -> tuple:
    """:func:`~vattn_mm.ops.conv.conv_backward` of :func:`_dwconv`."""
    grad_in, grad_w, grad_b = conv_backward(ffn.dwconv, _as_map(grad, batch, hw),
                                            _as_map(x, batch, hw),
                                            channels_last_weight(weight), needs)
    return None if grad_in is None else _as_tokens(grad_in), grad_w, grad_b


def token_chunks(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                 chunk_tokens: Optional[int], switch: Switch) -> torch.Tensor:
    """``fn(x)`` for a token-wise ``fn`` on (..., C) tokens; without autograd,
    where ``switch`` is on for ``x``, ``chunk_tokens`` tokens at a time."""
    # a captured graph would unroll the chunk loop (and freeze the token count)
    if (chunk_tokens is None or not switch.on(x) or torch.is_grad_enabled() or is_capturing()
            or x.shape[:-1].numel() <= chunk_tokens):
        return fn(x)
    flat = x.reshape(-1, x.shape[-1])
    first = fn(flat[:chunk_tokens])  # its dtype is the output's (autocast)
    out = first.new_empty(flat.shape[0], first.shape[-1])
    out[:chunk_tokens] = first
    for start in range(chunk_tokens, flat.shape[0], chunk_tokens):
        out[start:start + chunk_tokens] = fn(flat[start:start + chunk_tokens])
    return out.view(*x.shape[:-1], -1)

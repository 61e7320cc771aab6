"""Feed-forward networks over token sequences."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import is_capturing
from . import recompute
from .conv import DepthwiseConv2d, _channels_last_weight, conv_backward
from .fused import linear_act
from .patch_embed import Size, map_to_tokens, tokens_to_map
from .recompute import act_grad, act_linear


@MODELS.register_module()
class MLP(nn.Module):
    """``fc1 -> act -> drop -> fc2 -> drop`` over tokens (the ViT FFN); called
    as ``mlp(tokens, hw)`` like the other FFNs, ``hw`` unused.

    Without autograd (inference) long sequences run ``chunk_tokens`` tokens at
    a time, so the ``hidden_dims``-wide activation never exists for the whole
    map (on an 800x1344 image DilateFormer's first-stage hidden layer would be
    74 MiB twice over); every token's result is the same as unchunked.
    ``chunk_tokens=None`` turns this off.  In training the hidden activation
    is not kept for the backward (:func:`~vattn_mm.layers.recompute.act_linear`).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'), drop: float = 0.,
                 chunk_tokens: Optional[int] = 4096):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)
        self.chunk_tokens = chunk_tokens

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        chunk = self.chunk_tokens
        # a captured graph would unroll the chunk loop (and freeze the token count)
        if (chunk is None or torch.is_grad_enabled() or is_capturing()
                or x.shape[:-1].numel() <= chunk):
            return self._mlp(x)
        flat = x.reshape(-1, x.shape[-1])
        first = self._mlp(flat[:chunk])  # its dtype is the output's (autocast)
        out = first.new_empty(flat.shape[0], first.shape[-1])
        out[:chunk] = first
        for start in range(chunk, flat.shape[0], chunk):
            out[start:start + chunk] = self._mlp(flat[start:start + chunk])
        return out.view(*x.shape[:-1], -1)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return self.drop(act_linear(self.fc1(x), self.act, self.fc2, self.drop))
        return self.drop(self.fc2(self.drop(linear_act(x, self.fc1, self.act))))


@MODELS.register_module()
class ConvFFN(nn.Module):
    """FFN with a 3x3 depthwise convolution between its two projections
    (PVTv2, arXiv:2106.13797): ``fc1 -> [pre_act] -> dwconv -> act -> fc2``.

    Args:
        embed_dims: token channels.
        hidden_dims: hidden channels.
        act_cfg: activation after the depthwise conv.
        pre_act_cfg: optional activation right after ``fc1`` (PVTv2-li: ReLU).
        drop: dropout after the activation and after ``fc2``.

    In eager training the FFN runs over groups of hidden channels and keeps
    only the ``fc1`` and ``dwconv`` outputs for the backward
    (:func:`hidden_groups_apply`).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'),
                 pre_act_cfg: Optional[dict] = None, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.pre_act = build_activation_layer(pre_act_cfg) if pre_act_cfg else nn.Identity()
        self.dwconv = DepthwiseConv2d(hidden_dims, 3)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        if hidden_groups_apply(self, x):
            return _HiddenGroupsConvFFN.apply(
                x, self.fc1.weight, self.fc1.bias, self.dwconv.weight, self.dwconv.bias,
                self.fc2.weight, self.fc2.bias, self, hw)
        x = tokens_to_map(linear_act(x, self.fc1, self.pre_act), hw)
        if torch.is_grad_enabled():
            x, _ = map_to_tokens(self.dwconv(x))
            return self.drop(act_linear(x, self.act, self.fc2, self.drop))
        x, _ = map_to_tokens(self.dwconv.forward_act(x, self.act))
        return self.drop(self.fc2(self.drop(x)))


# ConvFFN training over groups of hidden channels: one autograd function runs
# ``fc1 -> pre_act -> dwconv -> act -> fc2`` on a slice of the hidden channels
# at a time (exact: the activations and the depthwise conv act per channel,
# ``fc2`` sums over the groups), so that no hidden-width map is larger than
# HIDDEN_GROUP_BYTES.  Freed memory is then reused: glibc gives every block
# over 32 MiB fresh pages from the kernel and returns them on ``free`` (P2T's
# and PVTv2's first-stage hidden map is 32 MiB at 512x512, 131 MiB at
# 800x1344), and touching fresh pages costs more than an elementwise pass over
# them.  Only the ``fc1`` and ``dwconv`` outputs of each group are kept for the
# backward; the activations are recomputed there.

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


def hidden_groups_apply(ffn: ConvFFN, x: torch.Tensor) -> bool:
    """Whether the grouped training path stands in for ``ffn``'s modules:
    plain ``nn.Linear`` projections, a stride-1 channels-last depthwise conv,
    activations with a listed gradient
    (:data:`~vattn_mm.layers.recompute.ACT_GRADS`, or no ``pre_act``), no
    active dropout, no hooks and eager autograd
    (:func:`~vattn_mm.layers.recompute.recomputes_act`)."""
    conv, parts = ffn.dwconv, (ffn.fc1, ffn.dwconv, ffn.pre_act)
    return (x.dim() == 3 and type(ffn.fc1) is nn.Linear and type(conv) is DepthwiseConv2d
            and conv.channels_last and conv.stride == (1, 1)
            and conv.padding_mode == 'zeros' and not isinstance(conv.padding, str)
            and (type(ffn.pre_act) is nn.Identity
                 or recompute.can_recompute(x, ffn.pre_act, *parts))
            and recompute.can_recompute(x, ffn.act, *parts)
            and recompute.recomputes_act(x, ffn.act, ffn.fc2, ffn.drop))


class _HiddenGroupsConvFFN(torch.autograd.Function):
    """:class:`ConvFFN` over groups of hidden channels; keeps the input and
    each group's ``fc1`` and ``dwconv`` outputs, recomputes the activations."""

    @staticmethod
    def forward(ctx, x, w1, b1, wd, bd, w2, b2, ffn: ConvFFN, hw: Size):
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


def _as_map(tokens: torch.Tensor, batch: int, hw: Size) -> torch.Tensor:
    """(B * N, C) tokens -> (B, C, H, W) channels-last view."""
    return tokens_to_map(tokens.view(batch, -1, tokens.shape[-1]), hw)


def _as_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) map -> (B * N, C) tokens."""
    return map_to_tokens(x)[0].reshape(-1, x.shape[1])


def _dwconv(ffn: ConvFFN, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
            batch: int, hw: Size) -> torch.Tensor:
    """``ffn.dwconv`` restricted to the channels of ``weight``, on tokens."""
    conv = ffn.dwconv
    out = F.conv2d(_as_map(x, batch, hw), _channels_last_weight(weight), bias, conv.stride,
                   conv.padding, conv.dilation, weight.shape[0])
    return _as_tokens(out)


def _dwconv_backward(ffn: ConvFFN, grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                     batch: int, hw: Size, needs: tuple[bool, bool, bool]) -> tuple:
    """:func:`~vattn_mm.layers.conv.conv_backward` of :func:`_dwconv`."""
    grad_in, grad_w, grad_b = conv_backward(ffn.dwconv, _as_map(grad, batch, hw),
                                            _as_map(x, batch, hw),
                                            _channels_last_weight(weight), needs)
    return None if grad_in is None else _as_tokens(grad_in), grad_w, grad_b

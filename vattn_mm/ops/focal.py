"""Focal modulation's context levels without their activations saved (path
``focal_recompute``; FocalNet, arXiv:2203.11926).

The context of :class:`~vattn_mm.layers.FocalModulation` passes ``L``
depthwise convolutions, each followed by GELU, and sums the levels weighted
by gates.  :class:`FocalContext` keeps only the convolutions' outputs for the
backward (the context and the gates are views of ``f``'s output, which the
modulation keeps anyway): each level's activation is recomputed from them,
one elementwise pass, instead of being stored.
"""
from __future__ import annotations

from typing import Optional, Protocol, Sequence

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .activations import act_grad
from .autograd import Switch, can_recompute
from .conv import conv_backward, conv_operands
from .registry import register_fast_path

register_fast_path('focal_recompute', "focal modulation keeps its levels' convolution "
                   'outputs only and recomputes their activations in the backward',
                   modes=('train', ))


class FocalLevels(Protocol):
    """What this module reads of a focal modulation
    (:class:`~vattn_mm.layers.FocalModulation`): its level convolutions, their
    activation, whether the sum is normalised, its switch, and its own
    ``context`` (the plain computation, which also hands out each level's
    convolution output where ``levels`` is a list)."""

    focal_layers: Sequence[nn.Conv2d]
    focal_level: int
    act: nn.Module
    normalize_modulator: bool
    focal_recompute: Switch

    def context(self, ctx: torch.Tensor, gates: torch.Tensor,
                levels: Optional[list] = None) -> torch.Tensor: ...


class FocalContext(torch.autograd.Function):
    """``module.context(context, gates)`` keeping the levels' convolution
    outputs only."""

    @staticmethod
    def forward(ctx, context: torch.Tensor, gates: torch.Tensor, module: FocalLevels,
                *weights: torch.Tensor) -> torch.Tensor:
        levels: list[torch.Tensor] = []
        out = module.context(context, gates, levels)
        ctx.module = module
        ctx.save_for_backward(context, gates, *levels)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        module = ctx.module
        act, top = module.act, module.focal_level
        context, gates, *levels = ctx.saved_tensors
        if module.normalize_modulator:
            grad = grad / (top + 1)
        inputs = [context] + [act(z) for z in levels]   # each conv's input, then the last level
        mean = inputs[-1].mean((2, 3), keepdim=True)
        grad_gates = [(grad * x).sum(1, keepdim=True) for x in inputs[1:]]
        grad_gates.append((grad * act(mean)).sum(1, keepdim=True))
        grad_mean = act_grad(act, (grad * gates[:, top:]).sum((2, 3), keepdim=True), mean)
        # gradient of the last level's output: its gate, and the global mean
        height, width = inputs[-1].shape[2:]
        grad_x = torch.addcmul(grad_mean / (height * width), grad, gates[:, top - 1:top])
        grad_weights = [None] * top
        for level in reversed(range(top)):
            conv = module.focal_layers[level]
            x, weight = conv_operands(conv, inputs[level])
            grad_in, grad_weights[level], _ = conv_backward(
                conv, act_grad(act, grad_x, levels[level]), x, weight,
                (level > 0 or ctx.needs_input_grad[0], ctx.needs_input_grad[3 + level], False))
            if level > 0:   # the previous level's output: its gate and this conv
                grad_x = torch.addcmul(grad_in, grad, gates[:, level - 1:level])
        return (grad_in, torch.cat(grad_gates, 1), None, *grad_weights)


def focal_context(module: FocalLevels, context: torch.Tensor, gates: torch.Tensor
                  ) -> torch.Tensor:
    """The gated sum of the context levels of FocalModulation ``module``
    (``module.context``), through :class:`FocalContext` where its
    ``focal_recompute`` switch is on for ``context`` and
    :func:`~vattn_mm.ops.autograd.can_recompute` allows."""
    if (module.focal_recompute.on(context)
            and can_recompute(context, module.act, *module.focal_layers)):
        return FocalContext.apply(context, gates, module,
                                  *(conv.weight for conv in module.focal_layers))
    return module.context(context, gates)

"""Keeping less for the backward pass and recomputing it instead.

Path ``recompute_act``, :func:`act_linear`: ``linear(act(h))`` that keeps
only ``h``.  Autograd keeps two hidden-width tensors for ``fc2(act(h))``:
``h`` (for the activation's gradient) and ``act(h)`` (for ``fc2``'s weight
gradient).  The FFN's hidden activations are the largest tensors a pyramid
backbone saves, and an activation is cheap to compute again:
:func:`act_linear` saves ``h`` alone and recomputes ``act(h)`` in the
backward, one hidden-width tensor less per FFN for one elementwise pass more
(docs/benchmarks.md).  The gradients are autograd's (the same kernels:
``gelu_backward``, ``threshold_backward``, ``hardswish_backward``, matrix
products) up to float summation order.

Taken only where nothing else would notice (:func:`recomputes_act`): an
activation listed in :data:`~.activations.ACTIVATIONS`, a plain
``nn.Linear``, no dropout between them, no hooks on either, autograd
recording, outside autocast, no Python dispatch mode (FLOP counters, fake tensors) and not while
``torch.compile`` or an export traces (their own partitioners decide what to
recompute).  Elsewhere the callers take the plain path.

Path ``recompute_norm``, :func:`norm_recomputed`: the output of a pre-norm
(LayerNorm) is kept by the layers it feeds (their weight gradients need it)
beside the norm's own input; inside this context the output is stored as
"the norm of that input" and recomputed when the backward reads it.  Same
conditions, and no other saved-tensor hooks active (``with_cp``'s
checkpointing, offloading).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from ..utils.tracing import eager_autograd
from .activations import ACTIVATIONS, act_grad
from .gates import global_forward_hooks, has_hooks
from .registry import Switch, register_fast_path

register_fast_path('recompute_act', "FFNs keep the activation's input only and recompute "
                   'the activation in the backward: one hidden-width map less saved',
                   modes=('train', ))
register_fast_path('recompute_norm', 'pre-norm outputs are recomputed from the norm input '
                   'in the backward instead of being saved', modes=('train', ),
                   needs=(hasattr(torch._C._autograd, '_top_saved_tensors_default_hooks'),
                          'a query whether saved-tensor hooks are active (torch._C._autograd.'
                          '_top_saved_tensors_default_hooks, not in torch 2.1)'))

def can_recompute(x: torch.Tensor, act: nn.Module, *modules: nn.Module) -> bool:
    """Whether a custom autograd function that recomputes ``act`` in its
    backward may replace ``act`` and ``modules`` applied to ``x`` (see the
    module docstring for the conditions)."""
    return (type(act) in ACTIVATIONS and not getattr(act, 'inplace', False)
            and eager_autograd(x, *(p for m in modules for p in m.parameters()))
            and not (has_hooks(act) or any(has_hooks(m) for m in modules)
                     or global_forward_hooks()))


def recomputes_act(h: torch.Tensor, act: nn.Module, linear: nn.Module,
                   drop: nn.Module) -> bool:
    """Whether :func:`act_linear` may recompute ``act`` in
    ``linear(drop(act(h)))`` (its switch aside)."""
    return (type(linear) is nn.Linear and can_recompute(h, act, linear, drop)
            and (not drop.training or not isinstance(drop, nn.Dropout) or drop.p == 0))


class ActLinear(torch.autograd.Function):
    """``linear(act(h))`` saving ``h`` and the weight only."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias, act: nn.Module):
        ctx.act = act
        ctx.save_for_backward(h, weight)
        return F.linear(act(h), weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        h, weight = ctx.saved_tensors
        need_h, need_w, need_b, _ = ctx.needs_input_grad
        flat = grad.reshape(-1, grad.shape[-1])
        grad_h = grad_w = grad_b = None
        if need_b:
            grad_b = flat.sum(0)
        if not (need_w or need_h):
            return grad_h, grad_w, grad_b, None
        # one hidden-width buffer: act(h), then the gradient of act(h), then of h
        hidden = ctx.act(h)
        if need_w:
            grad_w = flat.t().mm(hidden.reshape(-1, h.shape[-1]))
        if need_h:
            if not hidden.is_contiguous():
                hidden = torch.empty_like(h, memory_format=torch.contiguous_format)
            torch.mm(flat, weight, out=hidden.view(-1, h.shape[-1]))
            grad_h = act_grad(ctx.act, hidden, h, out=hidden)
        return grad_h, grad_w, grad_b, None


def act_linear(h: torch.Tensor, act: nn.Module, linear: nn.Module, drop: nn.Module,
               switch: Switch) -> torch.Tensor:
    """``linear(drop(act(h)))``, keeping only ``h`` for the backward where
    ``switch`` is on for ``h`` and :func:`recomputes_act` allows."""
    if switch.on(h) and recomputes_act(h, act, linear, drop):
        return ActLinear.apply(h, linear.weight, linear.bias, act)
    return linear(drop(act(h)))


def _saved_tensor_hooks_free() -> bool:
    autograd = torch._C._autograd
    return (autograd._saved_tensors_hooks_is_enabled()
            and autograd._top_saved_tensors_default_hooks(False) is None)


def recomputes_norm(x: torch.Tensor, norm: nn.Module) -> bool:
    """Whether :func:`norm_recomputed` may recompute ``norm(x)`` (its switch
    aside)."""
    return (type(norm) is nn.LayerNorm and eager_autograd(x, *norm.parameters())
            and not has_hooks(norm) and _saved_tensor_hooks_free())


@contextlib.contextmanager
def norm_recomputed(x: torch.Tensor, norm: nn.Module, switch: Switch) -> Iterator[torch.Tensor]:
    """Yield ``norm(x)``; what the code in the ``with`` block saves for the
    backward of it (or of views of it) is recomputed from ``x`` when read,
    where ``switch`` is on for ``x`` and :func:`recomputes_norm` allows (else
    saved as usual)."""
    out = norm(x)
    if not (switch.on(x) and recomputes_norm(x, norm)) or out.numel() == 0:
        yield out
        return
    # (the hooks live as long as what they saved: they must not hold ``out``)
    storage, version, dtype = out.untyped_storage().data_ptr(), out._version, out.dtype

    def pack(t: torch.Tensor):
        # views of the output, not changed in place since the norm made it
        if (t.untyped_storage().data_ptr() != storage or t.dtype != dtype
                or t._version != version):
            return t
        return x, t.size(), t.stride(), t.storage_offset()

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        source, size, stride, offset = packed
        with torch.no_grad():
            return norm(source).as_strided(size, stride, offset)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield out

"""The activations the fast paths handle, and what each path needs of them:
oneDNN's post-op that fuses the activation into the preceding linear /
convolution (:mod:`.fused`) and the gradient kernel a backward that
recomputes the activation calls (:mod:`.recompute`, :mod:`.ffn`,
:mod:`.focal`).  An activation missing from :data:`ACTIVATIONS` takes the
plain path everywhere."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

_ATEN = torch.ops.aten


def _gelu_grad(act: nn.GELU, grad, h, out=None):
    if out is None:
        return _ATEN.gelu_backward(grad, h, approximate=act.approximate)
    return _ATEN.gelu_backward.grad_input(grad, h, approximate=act.approximate, grad_input=out)


def _relu_grad(act: nn.ReLU, grad, h, out=None):
    if out is None:
        return _ATEN.threshold_backward(grad, h, 0)
    return _ATEN.threshold_backward.grad_input(grad, h, 0, grad_input=out)


def _hardswish_grad(act: nn.Hardswish, grad, h, out=None):
    return _ATEN.hardswish_backward(grad, h)   # its out variant copies a new tensor


@dataclass(frozen=True)
class Activation:
    """What the fast paths use of one activation type."""

    #: ``act -> (attr, algorithm)``: oneDNN's post-op computing ``act``
    post_op: Callable[[nn.Module], tuple[str, str]]
    #: ``(act, grad of act(h), h, out=None) -> grad of h``, written to ``out``
    #: (which may be ``grad`` itself) where the kernel has a true out
    #: variant, else a new tensor
    grad: Callable[..., torch.Tensor]


#: activation type -> its post-op and gradient kernel
ACTIVATIONS: dict[type, Activation] = {
    nn.GELU: Activation(lambda act: ('gelu', act.approximate), _gelu_grad),
    nn.ReLU: Activation(lambda act: ('relu', ''), _relu_grad),
    nn.Hardswish: Activation(lambda act: ('hardswish', ''), _hardswish_grad),
}


def fused_post_op(act: nn.Module) -> Optional[tuple[str, str]]:
    """oneDNN's ``(attr, algorithm)`` for ``act``, or None if it has none."""
    entry = ACTIVATIONS.get(type(act))
    return None if entry is None else entry.post_op(act)


def one_layout(grad: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``grad`` in the memory layout of ``h`` (itself where the strides
    already agree, else a copy with ``h``'s strides, or ``h``'s suggested
    layout where ``h`` is not dense).

    Gradient kernels are handed operands of one layout: torch 2.1's CPU
    ``gelu_backward`` takes oneDNN's kernel when ``h`` is contiguous and
    reads a channels-last ``grad`` there as if it were contiguous too (wrong
    elements, and memory past them)."""
    if grad.stride() == h.stride() or grad.shape != h.shape:
        return grad
    return torch.empty_like(h, dtype=grad.dtype).copy_(grad)


def act_grad(act: nn.Module, grad: torch.Tensor, h: torch.Tensor,
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The gradient of ``h`` from that of ``act(h)`` (an activation of
    :data:`ACTIVATIONS`), in ``out`` (``grad`` itself is allowed) where the
    kernel can write there; ``grad`` is first given the layout of ``h``
    (:func:`one_layout`), and written to a new tensor if that copied it."""
    aligned = one_layout(grad, h)
    if aligned is not grad:
        grad, out = aligned, None
    return ACTIVATIONS[type(act)].grad(act, grad, h, out)

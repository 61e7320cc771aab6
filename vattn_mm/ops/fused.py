"""Linear / convolution + activation in one oneDNN call for CPU inference.

PyTorch runs ``act(linear(x))`` as two passes over the hidden activation;
oneDNN applies the activation as a post-op of the matmul or convolution while
the result is still in cache (``torch.ops.mkldnn._linear_pointwise`` /
``_convolution_pointwise``, the kernels TorchInductor emits on CPU).  Results
equal the two-op path up to float rounding (timings: docs/benchmarks.md,
"Fast paths").

Taken where the ``fused_act`` switch is on for the input (CPU, float32) and
those kernels apply unchanged: without autograd (they have no backward),
outside autocast, an activation oneDNN has (:data:`~.activations.ACTIVATIONS`:
``nn.GELU``, ``nn.Hardswish``, ``nn.ReLU``), a plain ``nn.Linear`` /
``nn.Conv2d``, no hooks on it or on the activation (the fused call
bypasses both ``forward``s), no Python dispatch mode active (FLOP counters,
fake tensors), not while ``torch.compile`` traces (inductor emits these
kernels itself; the dispatch-mode check would be a graph break), not while
tracing for export (the ops have no ONNX form) and where this PyTorch build
has the ops; everything else takes the plain path.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .activations import fused_post_op
from .autograd import Switch, eager_inference, unobserved
from .registry import register_fast_path

_OPS = torch.ops.mkldnn
#: whether this PyTorch build has the fused oneDNN kernels
FUSED_ACT_AVAILABLE = (torch.backends.mkldnn.is_available()
                       and hasattr(_OPS, '_linear_pointwise')
                       and hasattr(_OPS, '_convolution_pointwise'))

register_fast_path(
    'fused_act', 'linear / convolution + activation as one oneDNN call in CPU inference',
    devices=('cpu', ), default_devices=('cpu', ), dtypes=(torch.float32, ),
    modes=('inference', ),
    needs=(FUSED_ACT_AVAILABLE, "a PyTorch build with oneDNN's fused pointwise kernels "
                                '(torch.ops.mkldnn._linear_pointwise)'))


def can_fuse(x: torch.Tensor, layer: nn.Module, act: nn.Module, switch: Switch) -> bool:
    """Whether ``act(layer(x))`` may run as one fused call (module docstring;
    the conditions: :func:`~vattn_mm.ops.autograd.eager_inference` and
    :func:`~vattn_mm.ops.autograd.unobserved`)."""
    return (FUSED_ACT_AVAILABLE and switch.on(x) and eager_inference(x)
            and unobserved(layer, act))


def linear_act(x: torch.Tensor, linear: nn.Module, act: nn.Module,
               switch: Switch) -> torch.Tensor:
    """``act(linear(x))``, fused where :func:`can_fuse` allows."""
    post_op = fused_post_op(act)
    if post_op is None or type(linear) is not nn.Linear or not can_fuse(x, linear, act, switch):
        return act(linear(x))
    flat = x.reshape(-1, x.shape[-1])
    out = _OPS._linear_pointwise(flat, linear.weight, linear.bias, post_op[0], [], post_op[1])
    return out.view(*x.shape[:-1], out.shape[-1])


def conv_act(x: torch.Tensor, conv: nn.Conv2d, act: nn.Module, switch: Switch,
             operands: Callable[[nn.Conv2d, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
             ) -> torch.Tensor:
    """``act(conv(x))``, fused where :func:`can_fuse` allows; otherwise the
    two modules are called (their hooks run).  ``operands(conv, x)`` gives
    the input and weight in the layout the fused kernel runs on."""
    post_op = fused_post_op(act)
    if (post_op is None or not can_fuse(x, conv, act, switch) or conv.padding_mode != 'zeros'
            or isinstance(conv.padding, str)):
        return act(conv(x))
    x, weight = operands(conv, x)
    return _OPS._convolution_pointwise(x, weight, conv.bias, list(conv.padding),
                                       list(conv.stride), list(conv.dilation), conv.groups,
                                       post_op[0], [], post_op[1])

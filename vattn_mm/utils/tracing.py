"""Whether a forward is being traced for export (ONNX), so layers take their
export paths: plain operators with an ONNX form and shape-generic code in
place of eager-only fast kernels (oneDNN fused ops) and Python branches on
concrete sizes; and whether a custom autograd function may stand in for
autograd's own graph (:func:`eager_autograd`)."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .compat import autocast_enabled, is_compiling

_STATE = threading.local()


def is_exporting() -> bool:
    """True inside :func:`export_paths`, while ``torch.onnx.export`` runs or
    while ``torch.jit`` traces."""
    return (getattr(_STATE, 'forced', False) or torch.onnx.is_in_onnx_export()
            or torch.jit.is_tracing())


def is_capturing() -> bool:
    """True while a forward is captured as a graph: exported (see
    :func:`is_exporting`) or traced by ``torch.compile``. Layers then skip
    their eager-only memory chunking, whose Python loops a capture would
    unroll (hundreds of copies at detection sizes)."""
    return is_exporting() or is_compiling()


def eager_autograd(*tensors: torch.Tensor, under_autocast: bool = False) -> bool:
    """Whether a custom autograd function may stand in for the graph autograd
    would record of an operation on ``tensors`` (its inputs and parameters):
    autograd recording and one of them requiring grad, a CPU or CUDA device,
    no capture (``torch.compile`` and export partition for themselves), no
    Python dispatch mode (FLOP counters, fake tensors) and, unless
    ``under_autocast``, outside autocast."""
    # is_capturing first: under torch.compile the dispatch-mode query is a graph break
    if not torch.is_grad_enabled() or is_capturing():
        return False
    device = tensors[0].device.type
    return (device in ('cpu', 'cuda') and any(t.requires_grad for t in tensors)
            and (under_autocast or not autocast_enabled(device))
            and _get_current_dispatch_mode() is None)


@contextlib.contextmanager
def export_paths(enabled: bool = True) -> Iterator[None]:
    """Run the export paths in eager mode too (to test them equal to the
    normal ones); the previous setting is restored on exit."""
    previous = getattr(_STATE, 'forced', False)
    _STATE.forced = enabled
    try:
        yield
    finally:
        _STATE.forced = previous

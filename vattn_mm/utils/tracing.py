"""Whether a forward is being traced for export (ONNX), so layers take their
export paths: plain operators with an ONNX form and shape-generic code in
place of eager-only fast kernels (oneDNN fused ops) and Python branches on
concrete sizes."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import torch

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
    return is_exporting() or torch.compiler.is_compiling()


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

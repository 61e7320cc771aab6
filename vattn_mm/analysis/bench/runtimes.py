"""How a case's model runs (:data:`RUNTIMES`): ``eager`` as it is;
``compile`` its forward wrapped in ``torch.compile`` (inductor, default
mode), the first iteration timed apart as the compile time; ``onnxruntime``
(forward, fp32, CPU) its forward exported to ONNX and run by an onnxruntime
session with the case's threads."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .cases import MODES, Case


@dataclass(frozen=True)
class Runtime:
    """How a case's model runs.  ``prepare(target, case)`` gets the built
    eager :class:`vattn_mm.analysis.Target` (weights initialised, on the
    case's device) and returns the target to measure: the same ``model``
    (its parameters are what training steps differentiate) with a new
    ``forward``; ``modes``: the modes it can measure; ``compiles``: its first
    iteration compiles (timed apart, ``compile_s``)."""

    prepare: Callable[[Any, Case], Any]
    modes: tuple[str, ...] = MODES
    compiles: bool = False


def eager(target: Any, case: Case) -> Any:
    return target


def inductor(target: Any, case: Case) -> Any:
    """``torch.compile`` (inductor, default mode) of the forward; compiled at
    its first call, the backward at the first backward."""
    import torch
    return replace(target, forward=torch.compile(target.forward))


def onnxruntime(target: Any, case: Case) -> Any:
    """The forward exported to ONNX (dynamic height and width, export size
    ``case.shape``: :func:`vattn_mm.deploy.export_onnx`), checked against
    PyTorch at ``case.shape`` (:func:`vattn_mm.deploy.check_onnx`, its default
    tolerances; a ``RuntimeError`` with its report if it fails) and run by
    an onnxruntime CPU session with the case's threads; fp32, CPU, inference."""
    import tempfile

    import torch
    from torch import nn

    from vattn_mm.deploy import OnnxModel, check_onnx, export_onnx, format_checks
    if case.device != 'cpu' or case.dtype != 'fp32':
        raise ValueError(f'runtime onnxruntime measures fp32 on the CPU, not {case.dtype} on '
                         f'{case.device}')

    class Forward(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = target.model

        def forward(self, images: torch.Tensor) -> Any:
            return target.forward(images)
    folder = tempfile.TemporaryDirectory(prefix='vattn-onnx-')
    path = Path(folder.name) / 'model.onnx'
    forward = Forward()
    export_onnx(forward, path, case.shape)
    checks = check_onnx(forward, path, [case.shape], threads=case.threads,
                        export_size=case.shape)
    if not all(c.ok for c in checks):
        raise RuntimeError(f'{case.target}: the ONNX export does not match PyTorch at '
                           f'{case.shape}:\n{format_checks(checks)}')
    session = OnnxModel(path, case.threads)
    session.folder = folder         # the file stays while the session lives (profiling reads it)
    return replace(target, forward=session)


#: runtime name -> :class:`Runtime`; another runtime is one entry
RUNTIMES: dict[str, Runtime] = {
    'eager': Runtime(eager),
    'compile': Runtime(inductor, compiles=True),
    'onnxruntime': Runtime(onnxruntime, modes=('fwd', )),
}


def runtime(name: str) -> Runtime:
    """The :data:`RUNTIMES` entry ``name`` (a clear error if there is none)."""
    if name not in RUNTIMES:
        raise ValueError(f'unknown runtime {name!r}; choose from {sorted(RUNTIMES)}')
    return RUNTIMES[name]

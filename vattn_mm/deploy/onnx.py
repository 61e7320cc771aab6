"""ONNX export of backbones (and any module returning tensors) with dynamic
height and width.

The exporter is PyTorch's TorchScript-based one (``torch.onnx.export(...,
dynamo=False)``): it records the sizes symbolically, so one file serves every
input size.  While it traces, :func:`~vattn_mm.ops.is_exporting` is true and
the layers take their export paths (plain operators for mmcv's deformable
convolution, adaptive pooling with traced sizes, shape-generic padding;
``docs/deployment.md``).

``selections=True`` exports a checking file whose graph also returns the
indices of every top-k selection (QuadTree attention), which
:func:`~vattn_mm.deploy.check_onnx` compares with PyTorch's.
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Optional, Sequence, Union

import torch
from torch import nn

from ..ops.quadtree import record_selections

#: default ONNX opset (GridSample needs 16 or more)
DEFAULT_OPSET = 17
INPUT_NAME = 'input'
SELECTION_PREFIX = 'selection'


class OnnxExportError(RuntimeError):
    """The model holds an operator without an ONNX form."""


def as_outputs(result) -> list[torch.Tensor]:
    """A model's result as a list of tensors (a ``TypeError`` for anything else)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    raise TypeError(f'the model must return a tensor or a tuple / list of tensors, got '
                    f'{type(result).__name__}')


class EvalNoGrad:
    """Eval mode and no autograd inside; every module's train flag restored after."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self):
        self.modes = {m: m.training for m in self.model.modules()}
        self.grad = torch.no_grad()
        self.grad.__enter__()
        self.model.eval()
        return self.model

    def __exit__(self, *exc):
        for module, mode in self.modes.items():
            module.training = mode
        self.grad.__exit__(*exc)


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters are (the CPU for a model without any)."""
    param = next(model.parameters(), None)
    return torch.device('cpu') if param is None else param.device


def _unsupported_operator(error: Exception) -> Optional[str]:
    text = str(error)
    for pattern in (r"operator '?([\w:.]+)'? to ONNX", r'ONNX export of (?:operator )?([\w:.]+)',
                    r'namespace (\w+::\w+)', r'(\w+::\w+)'):
        found = re.search(pattern, text)
        if found:
            return found.group(1)
    return None


class _WithSelections(nn.Module):
    """The model's outputs followed by the indices of every top-k selection
    it made (:class:`~vattn_mm.ops.quadtree.record_selections`)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor):
        with record_selections() as record:
            outputs = as_outputs(self.model(x))
        self.num_outputs = len(outputs)
        return (*outputs, *record.indices)


def export_onnx(model: nn.Module, path: Union[str, os.PathLike],
                input_size: Sequence[int] = (512, 512), *, opset: Optional[int] = None,
                dynamic: bool = True, selections: bool = False) -> list[str]:
    """Export ``model`` (run in eval mode on one ``(1, 3, H, W)`` image) to
    ``path`` with the input ``input`` and outputs ``output0``, ``output1``, ...;
    ``dynamic``: height and width of the input (and of every 4-d output) are
    symbolic, batch 1 fixed.  The model's train / eval state is restored.
    ``selections``: a checking file; the graph also returns the indices of
    every top-k selection, in call order, as ``selection0``, ... (all but
    their first dimension dynamic).

    Returns:
        The output names.

    Raises:
        OnnxExportError: naming the operator without an ONNX form.
    """
    h, w = (int(s) for s in input_size)
    image = torch.randn(1, 3, h, w, device=model_device(model),
                        generator=torch.Generator(model_device(model)).manual_seed(0))
    if selections:
        model = _WithSelections(model)
    with EvalNoGrad(model):
        outputs = as_outputs(model(image))
        num_outputs = model.num_outputs if selections else len(outputs)
        if selections and num_outputs == len(outputs):
            raise ValueError(f'{type(model.model).__name__} makes no top-k selection: '
                             'nothing to export with selections=True')
        names = [f'output{i}' for i in range(num_outputs)] + [
            f'{SELECTION_PREFIX}{i}' for i in range(len(outputs) - num_outputs)]
        axes = {}
        if dynamic:
            axes[INPUT_NAME] = {2: 'height', 3: 'width'}
            axes.update({name: {2: f'{name}_height', 3: f'{name}_width'}
                         for name, out in zip(names, outputs)
                         if out.dim() == 4 and not name.startswith(SELECTION_PREFIX)})
            axes.update({name: {d: f'{name}_{d}' for d in range(1, out.dim())}
                         for name, out in zip(names, outputs)
                         if name.startswith(SELECTION_PREFIX)})
        try:
            with warnings.catch_warnings():
                # the traced size checks (guards) are expected: sizes stay symbolic
                warnings.simplefilter('ignore', torch.jit.TracerWarning)
                torch.onnx.export(model, (image, ), os.fspath(path), dynamo=False,
                                  input_names=[INPUT_NAME], output_names=names,
                                  dynamic_axes=axes or None,
                                  opset_version=opset or DEFAULT_OPSET,
                                  do_constant_folding=True)
        except Exception as error:   # the exporter raises several types
            operator = _unsupported_operator(error)
            if operator is None:
                raise
            first_line = str(error).strip().splitlines()[0][:300]
            label = type(model.model if selections else model).__name__
            raise OnnxExportError(
                f'{label} cannot be exported to ONNX: operator {operator} '
                f'has no ONNX form (opset {opset or DEFAULT_OPSET}): {first_line}') from error
    return names

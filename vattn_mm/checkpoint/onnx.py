"""ONNX export of backbones (and any module returning tensors) with dynamic
height and width, an onnxruntime wrapper and the check of one against the other.

The exporter is PyTorch's TorchScript-based one (``torch.onnx.export(...,
dynamo=False)``): it records the sizes symbolically, so one file serves every
input size.  While it traces, :func:`~vattn_mm.utils.is_exporting` is true and
the layers take their export paths (plain operators for mmcv's deformable
convolution, adaptive pooling with traced sizes, shape-generic padding;
``docs/deployment.md``).

Relative error (:func:`check_onnx`): ``max|ort - torch| / max|torch|`` over
one output at one input size.
"""
from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

#: default ONNX opset (GridSample needs 16 or more)
DEFAULT_OPSET = 17
INPUT_NAME = 'input'


class OnnxExportError(RuntimeError):
    """The model holds an operator without an ONNX form."""


def _as_outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    raise TypeError(f'the model must return a tensor or a tuple / list of tensors, got '
                    f'{type(result).__name__}')


class _EvalNoGrad:
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


def _device(model: nn.Module) -> torch.device:
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


def export_onnx(model: nn.Module, path: Union[str, os.PathLike],
                input_size: Sequence[int] = (512, 512), *, opset: Optional[int] = None,
                dynamic: bool = True) -> list[str]:
    """Export ``model`` (run in eval mode on one ``(1, 3, H, W)`` image) to
    ``path`` with the input ``input`` and outputs ``output0``, ``output1``, ...;
    ``dynamic``: height and width of the input (and of every 4-d output) are
    symbolic, batch 1 fixed.  The model's train / eval state is restored.

    Returns:
        The output names.

    Raises:
        OnnxExportError: naming the operator without an ONNX form.
    """
    h, w = (int(s) for s in input_size)
    image = torch.randn(1, 3, h, w, device=_device(model),
                        generator=torch.Generator(_device(model)).manual_seed(0))
    with _EvalNoGrad(model):
        outputs = _as_outputs(model(image))
        names = [f'output{i}' for i in range(len(outputs))]
        axes = {}
        if dynamic:
            axes[INPUT_NAME] = {2: 'height', 3: 'width'}
            axes.update({name: {2: f'{name}_height', 3: f'{name}_width'}
                         for name, out in zip(names, outputs) if out.dim() == 4})
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
            raise OnnxExportError(
                f'{type(model).__name__} cannot be exported to ONNX: operator {operator} '
                f'has no ONNX form (opset {opset or DEFAULT_OPSET}): {first_line}') from error
    return names


class OnnxModel:
    """An onnxruntime CPU session on an exported file, called like the model:
    ``(1, 3, H, W)`` tensor -> list of output tensors."""

    def __init__(self, path: Union[str, os.PathLike], threads: Optional[int] = None):
        import onnxruntime as ort
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(os.fspath(path), options,
                                            providers=['CPUExecutionProvider'])
        self.input_name = self.session.get_inputs()[0].name
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        array = x.detach().to('cpu', torch.float32).contiguous().numpy()
        return [torch.from_numpy(np.asarray(out))
                for out in self.session.run(None, {self.input_name: array})]


@dataclass
class OutputCheck:
    """One output at one input size: onnxruntime against PyTorch."""

    size: tuple
    output: str
    shape: tuple
    rel_error: float
    ok: bool


def check_onnx(model: nn.Module, path: Union[str, os.PathLike], sizes: Sequence[Sequence[int]],
               rtol: float = 1e-4, threads: Optional[int] = None) -> list[OutputCheck]:
    """Run ``model`` (eval, restored after) and the exported file on a random
    ``(1, 3, H, W)`` image for every ``(H, W)`` in ``sizes``; per size and
    output the relative error ``max|ort - torch| / max|torch|`` and whether it
    is within ``rtol`` (a shape mismatch counts as an infinite error)."""
    session = OnnxModel(path, threads)
    results = []
    for h, w in sizes:
        image = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h * 7919 + w))
        with _EvalNoGrad(model):
            expected = [t.float().cpu() for t in
                        _as_outputs(model(image.to(_device(model))))]
        got = session(image)
        if len(got) != len(expected):
            raise RuntimeError(f'{path}: {len(got)} outputs, the model gives {len(expected)}')
        for name, ref, out in zip(session.output_names, expected, got):
            if tuple(out.shape) != tuple(ref.shape):
                error = float('inf')
            else:
                scale = ref.abs().max().item()
                error = (out - ref).abs().max().item() / (scale if scale > 0 else 1.)
            results.append(OutputCheck((h, w), name, tuple(ref.shape), error, error <= rtol))
    return results


def format_checks(checks: Sequence[OutputCheck]) -> str:
    """The checks as a text table."""
    lines = [f'{"size":>10}  {"output":<10} {"shape":<22} {"rel. error":>10}  ok']
    for c in checks:
        lines.append(f'{c.size[0]:>4}x{c.size[1]:<5}  {c.output:<10} {str(c.shape):<22} '
                     f'{c.rel_error:>10.2e}  {"yes" if c.ok else "NO"}')
    return '\n'.join(lines)

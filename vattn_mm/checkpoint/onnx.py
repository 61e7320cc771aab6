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

Models with a discrete top-k selection (QuadTree attention) can flip between
near-equal scores on rounding-level differences, so their outputs need not
agree to rounding.  For them the check also exports a checking file whose
graph returns every selection's indices, pins PyTorch's selections to
onnxruntime's (:mod:`vattn_mm.ops.selection`) and compares against that
run, after verifying that every differing selection is a near-tie of
PyTorch's own scores (:class:`SelectionCheck`).
"""
from __future__ import annotations

import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from ..ops.selection import pin_selections, record_selections

#: default ONNX opset (GridSample needs 16 or more)
DEFAULT_OPSET = 17
INPUT_NAME = 'input'
#: default largest score gap accepted where onnxruntime's top-k selection
#: differs from PyTorch's: (PyTorch's k-th best score - the lowest score
#: onnxruntime kept) / the row's largest absolute score.  The scores of the
#: two runtimes differ by rounding (about 1e-6 relative), so a genuine flip
#: between near-equal scores has a gap of that order; a wrong key is off by
#: a sizeable part of the score spread.
DEFAULT_TIE_TOL = 1e-4
SELECTION_PREFIX = 'selection'


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


class _WithSelections(nn.Module):
    """The model's outputs followed by the indices of every top-k selection
    it made (:class:`~vattn_mm.ops.selection.record_selections`)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor):
        with record_selections() as record:
            outputs = _as_outputs(self.model(x))
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
    image = torch.randn(1, 3, h, w, device=_device(model),
                        generator=torch.Generator(_device(model)).manual_seed(0))
    if selections:
        model = _WithSelections(model)
    with _EvalNoGrad(model):
        outputs = _as_outputs(model(image))
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
class SelectionCheck:
    """The top-k selections at one input size: onnxruntime's (from the
    checking file) against PyTorch's own, with PyTorch pinned to onnxruntime's.

    ``rows``: selections made (one per query per top-k call) over ``calls``
    top-k calls; ``differing``: rows where onnxruntime kept another key set;
    ``max_gap``: the largest (PyTorch's k-th best score - the lowest score
    onnxruntime kept) / the row's largest absolute score, PyTorch's scores
    (0 where nothing differs); ``unpinned_error``: the largest plain
    relative error at this size; ``pinned``: whether the outputs were
    compared with PyTorch pinned to onnxruntime's selections (not where
    every row keeps the same key set as PyTorch's, in any order: the plain
    comparison)."""

    size: tuple
    calls: int
    rows: int
    differing: int
    max_gap: float
    tolerance: float
    unpinned_error: float
    pinned: bool

    @property
    def ok(self) -> bool:
        return self.max_gap <= self.tolerance

    def describe(self) -> str:
        size = f'{self.size[0]}x{self.size[1]}'
        if not self.pinned:
            return (f'{size}: all {self.rows} selections ({self.calls} top-k calls) as '
                    "PyTorch's: plain comparison")
        if self.differing == 0:   # the same decisions, on candidates in another order
            return (f'{size}: every selection as PyTorch\'s given onnxruntime\'s earlier ones '
                    f'({self.rows} selections, {self.calls} top-k calls; tied candidates '
                    'ordered otherwise); errors with PyTorch pinned to onnxruntime\'s selection '
                    f'(unpinned: {self.unpinned_error:.2e})')
        what = (f'{self.differing} of {self.rows} selections ({self.calls} top-k calls) differ '
                f"from PyTorch's, largest score gap {self.max_gap:.1e} of the row's score scale")
        if not self.ok:
            return (f'{size}: {what} > tolerance {self.tolerance:g}: onnxruntime kept keys '
                    'that are not near-ties of the best ones (a wrong selection, not rounding)')
        return (f'{size}: {what} <= {self.tolerance:g} (near-ties); errors with PyTorch pinned '
                f"to onnxruntime's selection (unpinned: {self.unpinned_error:.2e})")


@dataclass
class OutputCheck:
    """One output at one input size: onnxruntime against PyTorch (pinned to
    onnxruntime's top-k selection where ``selection`` says they differ)."""

    size: tuple
    output: str
    shape: tuple
    rel_error: float
    ok: bool
    selection: Optional[SelectionCheck] = None

    @property
    def pinned(self) -> bool:
        return self.selection is not None and self.selection.pinned


def _relative_errors(expected: Sequence[torch.Tensor],
                     got: Sequence[torch.Tensor]) -> list[float]:
    """``max|got - expected| / max|expected|`` per output (inf on a shape mismatch)."""
    errors = []
    for ref, out in zip(expected, got):
        if tuple(out.shape) != tuple(ref.shape):
            errors.append(float('inf'))
        else:
            scale = ref.abs().max().item()
            errors.append((out - ref).abs().max().item() / (scale if scale > 0 else 1.))
    return errors


class _CheckingFile:
    """The selection-returning export of the checked model (made on first
    use, in a temporary folder) and its session."""

    def __init__(self, model: nn.Module, size: Sequence[int], opset: Optional[int],
                 threads: Optional[int]):
        self.model, self.size, self.opset, self.threads = model, tuple(size), opset, threads
        self.session = None

    def __call__(self, image: torch.Tensor) -> list[torch.Tensor]:
        if self.session is None:
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, 'selections.onnx')
                export_onnx(self.model, path, self.size, opset=self.opset, selections=True)
                self.session = OnnxModel(path, self.threads)
        return self.session(image)


def _same_keys(own: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether every row keeps the same key set (in any order: the order
    only changes the order of summation)."""
    return (own.shape == other.shape
            and torch.equal(own.sort(dim=-1).values, other.to(own.device).sort(dim=-1).values))


def _check_selections(model: nn.Module, image: torch.Tensor, own: Sequence[torch.Tensor],
                      ort: Sequence[torch.Tensor], got: Sequence[torch.Tensor],
                      expected: list[torch.Tensor], tie_tol: float
                      ) -> tuple[list[torch.Tensor], SelectionCheck]:
    """PyTorch's outputs to compare ``got`` with (pinned to onnxruntime's
    selections ``ort`` where they differ from PyTorch's own ``own``) and the
    selection check."""
    size, unpinned = tuple(image.shape[-2:]), max(_relative_errors(expected, got))
    if len(ort) != len(own):
        raise RuntimeError(f'the checking file returns {len(ort)} selections, the model '
                           f'makes {len(own)}')
    if all(_same_keys(a, b) for a, b in zip(own, ort)):
        rows = sum(t[..., 0].numel() for t in own)
        return expected, SelectionCheck(size, len(own), rows, 0, 0., tie_tol, unpinned, False)
    with _EvalNoGrad(model), pin_selections(ort) as pinned:
        expected = [t.float().cpu() for t in _as_outputs(model(image.to(_device(model))))]
    return expected, SelectionCheck(
        size, len(own), sum(c.rows for c in pinned.checks),
        sum(c.differing for c in pinned.checks), max(c.max_gap for c in pinned.checks),
        tie_tol, unpinned, True)


def check_onnx(model: nn.Module, path: Union[str, os.PathLike], sizes: Sequence[Sequence[int]],
               rtol: float = 1e-4, threads: Optional[int] = None, *,
               export_size: Optional[Sequence[int]] = None, opset: Optional[int] = None,
               tie_tol: float = DEFAULT_TIE_TOL) -> list[OutputCheck]:
    """Run ``model`` (eval, restored after) and the exported file on a random
    ``(1, 3, H, W)`` image for every ``(H, W)`` in ``sizes``; per size and
    output the relative error ``max|ort - torch| / max|torch|`` and whether it
    is within ``rtol`` (a shape mismatch counts as an infinite error).

    A model that makes top-k selections is also exported (at ``export_size``,
    default the first check size; ``opset``) as a checking file returning
    them.  Where onnxruntime's selections differ from PyTorch's, PyTorch is
    run with them pinned and the errors are against that run; the check then
    also fails where a differing selection kept a key scoring more than
    ``tie_tol`` (relative to the row's score scale) below PyTorch's k-th best
    (:class:`SelectionCheck`, in every such size's ``selection``).
    """
    session = OnnxModel(path, threads)
    checking = _CheckingFile(model, export_size or sizes[0], opset, threads)
    results = []
    for h, w in sizes:
        image = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h * 7919 + w))
        with _EvalNoGrad(model), record_selections() as own:
            expected = [t.float().cpu() for t in
                        _as_outputs(model(image.to(_device(model))))]
        got = session(image)
        if len(got) != len(expected):
            raise RuntimeError(f'{path}: {len(got)} outputs, the model gives {len(expected)}')
        selection = None
        if own.indices:
            ort = checking(image)[len(expected):]
            expected, selection = _check_selections(model, image, own.indices, ort, got,
                                                    expected, tie_tol)
        for name, ref, error in zip(session.output_names, expected,
                                    _relative_errors(expected, got)):
            results.append(OutputCheck((h, w), name, tuple(ref.shape), error,
                                       error <= rtol and (selection is None or selection.ok),
                                       selection))
    return results


def format_checks(checks: Sequence[OutputCheck]) -> str:
    """The checks as a text table (``*``: against PyTorch pinned to
    onnxruntime's top-k selection), then a line per size on the selections."""
    lines = [f'{"size":>10}  {"output":<10} {"shape":<22} {"rel. error":>10}  ok']
    for c in checks:
        lines.append(f'{c.size[0]:>4}x{c.size[1]:<5}  {c.output:<10} {str(c.shape):<22} '
                     f'{c.rel_error:>10.2e}{"*" if c.pinned else " "} {"yes" if c.ok else "NO"}')
    selections = {c.size: c.selection for c in checks if c.selection is not None}
    if selections:
        lines.append("top-k selections, onnxruntime against PyTorch's own (* pinned):")
        lines += [f'  {s.describe()}' for s in selections.values()]
    return '\n'.join(lines)

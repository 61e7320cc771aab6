"""The check of an exported file in onnxruntime against PyTorch, and its report.

Relative error (:func:`check_onnx`): ``max|ort - torch| / max|torch|`` over
one output at one input size.

Models with a discrete top-k selection (QuadTree attention) can flip between
near-equal scores on rounding-level differences, so their outputs need not
agree to rounding.  For them the check also exports a checking file whose
graph returns every selection's indices, pins PyTorch's selections to
onnxruntime's (:mod:`vattn_mm.ops.quadtree`) and compares against that
run, after verifying that every differing selection is a near-tie of
PyTorch's own scores (:class:`SelectionCheck`).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
from torch import nn

from ..ops.quadtree import pin_selections, record_selections
from .onnx import EvalNoGrad, as_outputs, export_onnx, model_device
from .runtime import OnnxModel

#: default largest score gap accepted where onnxruntime's top-k selection
#: differs from PyTorch's: (PyTorch's k-th best score - the lowest score
#: onnxruntime kept) / the row's largest absolute score.  The scores of the
#: two runtimes differ by rounding (about 1e-6 relative), so a genuine flip
#: between near-equal scores has a gap of that order; a wrong key is off by
#: a sizeable part of the score spread.
DEFAULT_TIE_TOL = 1e-4


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
    with EvalNoGrad(model), pin_selections(ort) as pinned:
        expected = [t.float().cpu() for t in as_outputs(model(image.to(model_device(model))))]
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
        with EvalNoGrad(model), record_selections() as own:
            expected = [t.float().cpu() for t in
                        as_outputs(model(image.to(model_device(model))))]
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

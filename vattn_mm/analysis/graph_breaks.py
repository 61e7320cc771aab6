"""Where ``torch.compile`` splits a model: the graph breaks TorchDynamo
(``torch._dynamo.explain``) meets on one forward, with their reasons and the
line of this package that leads to each."""
from __future__ import annotations

import os.path as osp
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

#: the package folder: frames under it are "our code"
PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))


@dataclass(frozen=True)
class GraphBreak:
    """One graph break: dynamo's reason (first line), the innermost frame
    (``file:line``) and the innermost frame in this package (empty when the
    break is reached without passing through our code)."""

    reason: str
    at: str
    ours: str

    def __str__(self) -> str:
        where = self.ours or self.at or '?'
        inner = f' (in {self.at})' if self.ours and self.at != self.ours else ''
        return f'{where}: {self.reason}{inner}'


@dataclass(frozen=True)
class CompileReport:
    """What :func:`compile_report` found: the number of graphs and the
    distinct graph breaks (first occurrence order)."""

    graphs: int
    breaks: tuple[GraphBreak, ...]

    @property
    def ours(self) -> tuple[GraphBreak, ...]:
        """The breaks reached through this package's code."""
        return tuple(b for b in self.breaks if b.ours)

    def format(self) -> str:
        head = f'{self.graphs} graph(s), {len(self.breaks)} distinct break(s)'
        return '\n'.join([head] + [f'  {b}' for b in self.breaks])


def _root_of(filename: str, roots: Sequence[str]) -> Optional[str]:
    path = osp.abspath(filename)
    return next((root for root in roots if path.startswith(root + osp.sep)), None)


def _frame(frame: Any, roots: Sequence[str]) -> str:
    """``file:line``, the file relative to the folder above its root
    (``vattn_mm/layers/x.py:12``) when under one."""
    path, root = osp.abspath(frame.filename), _root_of(frame.filename, roots)
    if root is not None:
        path = osp.relpath(path, osp.dirname(root))
    return f'{path}:{frame.lineno}'


def compile_report(model: Callable[..., Any], *inputs: Any,
                   roots: Optional[Sequence[str]] = None) -> CompileReport:
    """Trace ``model(*inputs)`` with TorchDynamo (no compilation:
    ``torch._dynamo.explain`` only collects the graphs) and list its graph
    breaks; "ours" are those reached through a file under ``roots`` (folders;
    default: this package).  Runs the model once, in its own train / eval
    mode.  Dynamo's caches are reset before and after, so that earlier
    compilations neither hide nor add breaks."""
    import torch._dynamo as dynamo

    roots = [osp.abspath(r) for r in (roots or (PACKAGE_DIR, ))]
    dynamo.reset()
    try:
        out = dynamo.explain(model)(*inputs)
    finally:
        dynamo.reset()
    breaks: dict[tuple[str, str], GraphBreak] = {}
    for item in out.break_reasons:
        stack = list(item.user_stack or ())
        reason = item.reason.strip().splitlines()[0] if item.reason.strip() else '?'
        explanation = [line.strip() for line in item.reason.splitlines()
                       if line.strip().startswith('Explanation:')]
        if explanation:
            reason = f'{reason}: {explanation[0][len("Explanation:"):].strip()}'
        ours = [_frame(f, roots) for f in stack if _root_of(f.filename, roots)]
        brk = GraphBreak(reason, _frame(stack[-1], roots) if stack else '',
                         ours[-1] if ours else '')
        breaks.setdefault((brk.reason, brk.at), brk)
    return CompileReport(out.graph_count, tuple(breaks.values()))



def target_graph_breaks(spec: str, shape: tuple[int, int], modes: Sequence[str],
                        device: str = 'cpu') -> dict[str, CompileReport]:
    """The graph breaks of a benchmark target (a config or ``Family:arch``,
    :func:`vattn_mm.analysis.build_target`) on one input of ``shape``, per
    mode of ``modes``: ``'fwd'`` in eval mode without autograd, ``'train'``
    (for every training mode) in train mode."""
    import torch

    from .model_spec import build_target
    target = build_target(spec, device=device)
    images = torch.randn(1, 3, *shape, device=device)
    reports = {}
    for mode in dict.fromkeys('fwd' if m == 'fwd' else 'train' for m in modes):
        target.model.train(mode == 'train')
        with torch.set_grad_enabled(mode == 'train'):
            reports[mode] = compile_report(target.forward, images)
    return reports

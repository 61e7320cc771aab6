"""The GPU check's report: checks in sections, each ``passed``, ``failed``
(with the error) or ``skipped`` (with the reason), run under a wall-clock
budget, written as JSON and markdown."""
from __future__ import annotations

import json
import platform
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from vattn_mm.utils import atomic_write

PASSED, FAILED, SKIPPED = 'passed', 'failed', 'skipped'


@dataclass
class Check:
    name: str
    status: str
    detail: str = ''
    seconds: float = 0.
    metrics: dict = field(default_factory=dict)


@dataclass
class Section:
    name: str
    title: str
    checks: list = field(default_factory=list)
    note: str = ''


class Report:
    """Checks grouped in sections, under a wall-clock budget: a check that
    would start after ``budget_s`` is recorded as skipped instead."""

    def __init__(self, device: str, quick: bool, budget_s: float):
        self.device, self.quick, self.budget_s = device, quick, budget_s
        self.start = time.perf_counter()
        self.sections: list[Section] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def section(self, name: str, title: str, note: str = '') -> Section:
        section = Section(name, title, note=note)
        self.sections.append(section)
        return section

    def run(self, section: Section, name: str, fn: Callable[[], Optional[dict]]) -> Check:
        """Run ``fn`` (returns metrics or None; raises on failure) as one check."""
        if self.elapsed() > self.budget_s:
            check = Check(name, SKIPPED, f'time budget ({self.budget_s:.0f} s) spent')
        else:
            start = time.perf_counter()
            try:
                metrics = fn() or {}
                check = Check(name, PASSED, metrics=metrics)
            except Skip as skip:
                check = Check(name, SKIPPED, str(skip))
            except Exception as exc:  # one failure is recorded, the rest still runs
                lines = traceback.format_exception_only(type(exc), exc)
                check = Check(name, FAILED, ''.join(lines).strip()[-2000:])
            check.seconds = round(time.perf_counter() - start, 3)
        section.checks.append(check)
        return check

    def counts(self) -> dict:
        out = {PASSED: 0, FAILED: 0, SKIPPED: 0}
        for section in self.sections:
            for check in section.checks:
                out[check.status] += 1
        return out

    def failed(self) -> bool:
        return self.counts()[FAILED] > 0

    def as_dict(self) -> dict:
        return dict(device=self.device, device_name=device_name(self.device), quick=self.quick,
                    budget_s=self.budget_s, elapsed_s=round(self.elapsed(), 1),
                    torch=torch.__version__, cuda=torch.version.cuda,
                    python=platform.python_version(),
                    counts=self.counts(), sections=[asdict(s) for s in self.sections])

    def markdown(self) -> str:
        data = self.as_dict()
        c = data['counts']
        lines = [f"# GPU acceptance check: {data['device_name']}", '',
                 f"torch {data['torch']} (CUDA {data['cuda']}), "
                 f"{'quick' if self.quick else 'full'} "
                 f"run, {data['elapsed_s']} s of a {self.budget_s:.0f} s budget: "
                 f"{c[PASSED]} passed, {c[FAILED]} failed, {c[SKIPPED]} skipped.", '']
        for section in self.sections:
            lines += [f'## {section.title}', '']
            if section.note:
                lines += [section.note, '']
            if not section.checks:
                continue
            lines += ['| check | status | s | result |', '|---|---|---|---|']
            for check in section.checks:
                result = ', '.join(f'{k} {_fmt(v)}' for k, v in check.metrics.items())
                text = (check.detail or result).replace('|', '/').replace('\n', ' ')
                lines.append(f'| {check.name} | {check.status} | {check.seconds:.1f} | {text} |')
            lines.append('')
        return '\n'.join(lines)

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = out / 'gpu_check.json', out / 'gpu_check.md'
        atomic_write(paths[0], (json.dumps(self.as_dict(), indent=1) + '\n').encode())
        atomic_write(paths[1], (self.markdown() + '\n').encode())
        return paths


class Skip(Exception):
    """A check that cannot run here (recorded as skipped, with the reason)."""


def _fmt(value: Any) -> str:
    return f'{value:.4g}' if isinstance(value, float) else str(value)


def device_name(device: str) -> str:
    if torch.device(device).type == 'cuda' and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f'{platform.processor() or platform.machine()} CPU'


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)

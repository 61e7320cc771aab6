"""The zoo's speed sweep: each variant at growing input sizes until a memory
or time cap, measured in the benchmark tools' worker processes
(:mod:`vattn_mm.analysis.bench`), and the growth exponents in the number of
tokens."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

from vattn_mm.analysis.bench import DEFAULT_MODES, Case, Measurement, Row, fill_row, growth_exponent
from .variants import complexity

#: the :attr:`vattn_mm.analysis.bench.Case.builder` of a zoo variant
BUILDER = 'attention_zoo.variants:build_zoo_target'


class Workers(Protocol):
    """What measures a sweep's cases: the tool's kept worker processes
    (``tools/analysis/bench_workers.py``'s ``CaseWorkers``), raising one of
    ``errors`` for a case that fails or times out."""

    errors: tuple[type[BaseException], ...]

    def run_case(self, case: Case, timeout: Optional[float] = None) -> Measurement:
        ...


def tokens(size: int) -> int:
    """Stage-1 tokens (stride 4) of a ``size`` x ``size`` input."""
    return math.ceil(size / 4) ** 2


def _extrapolate(rows: Sequence[Row], size: int, key: str) -> Optional[float]:
    """``key`` at ``size`` from the last two sizes that measured it (power
    law in the tokens, at least linear); None before two sizes."""
    pts = [(tokens(int(r.shape.split('x')[0])), getattr(r, key)) for r in rows
           if getattr(r, key)]
    if len(pts) < 2:
        return None
    (x0, y0), (x1, y1) = pts[-2:]
    slope = math.log(y1 / y0) / math.log(x1 / x0) if x1 != x0 and y0 > 0 else 1.0
    return y1 * (tokens(size) / x1) ** max(slope, 1.0)


def predicted_peak(rows: Sequence[Row], size: int,
                   modes: Sequence[str] = DEFAULT_MODES) -> Optional[float]:
    """Peak MiB at ``size`` of the largest of ``modes`` (training, else
    forward), extrapolated."""
    keys = ('train_peak_mib', 'fwd_peak_mib') if 'train' in modes else ('fwd_peak_mib', )
    return next((p for p in (_extrapolate(rows, size, k) for k in keys) if p is not None), None)


def predicted_latency_s(rows: Sequence[Row], size: int,
                        modes: Sequence[str]) -> Optional[float]:
    """Seconds of the slowest of ``modes`` at ``size``, extrapolated."""
    guesses = [_extrapolate(rows, size, f'{m}_ms') for m in modes]
    guesses = [g / 1e3 for g in guesses if g is not None]
    return max(guesses) if guesses else None


def sweep(workers: Workers, spec: str, sizes: Sequence[int], modes: Sequence[str], *,
          memory_cap_mib: float, case_timeout: float, train_max_size: Optional[int] = None,
          time_cap_s: Optional[float] = None, errors: tuple[type, ...] = (RuntimeError, ),
          **case_kwargs) -> list[Row]:
    """One :class:`vattn_mm.analysis.bench.Row` per size of ``spec`` until the
    memory cap or, if given, the time cap (seconds per iteration,
    extrapolated like the peak); the training step only up to
    ``train_max_size`` (None: every size).  The cases run in ``workers`` (a
    timing and a memory process shared by the variant's cases); a case
    failing with one of ``errors`` stops the variant."""
    rows: list[Row] = []
    for size in sizes:
        modes_here = [m for m in modes
                      if m != 'train' or train_max_size is None or size <= train_max_size]
        guess = predicted_peak(rows, size, modes_here)
        seconds = predicted_latency_s(rows, size, modes_here)
        stop = ''
        if guess is not None and guess > memory_cap_mib:
            stop = f'stopped: predicted peak {guess:.0f} MiB > memory cap {memory_cap_mib:.0f} MiB'
        elif time_cap_s is not None and seconds is not None and seconds > time_cap_s:
            stop = f'stopped: predicted {seconds:.0f} s per iteration > time cap {time_cap_s:.0f} s'
        # counted only where it runs: a count by a real forward (data-dependent
        # mixers) costs what the case would
        params, gmacs = (rows[-1].params_m, math.nan) if stop else complexity(spec, size)
        row = Row(spec, f'{size}x{size}', case_kwargs.get('device', 'cpu'),
                  case_kwargs.get('dtype', 'fp32'), params, gmacs, error=stop)
        if stop:
            rows.append(row)
            break
        for mode in modes_here:
            case = Case(spec, (size, size), mode, builder=BUILDER, **case_kwargs)
            try:
                fill_row(row, mode, workers.run_case(case, timeout=case_timeout))
            except errors as err:
                row.error = f'stopped: {mode} failed: {str(err).splitlines()[0]}'
                break
        peaks = [p for p in (row.fwd_peak_mib, row.train_peak_mib) if p]
        if not row.error and peaks and max(peaks) > memory_cap_mib:
            row.error = f'stopped: peak {max(peaks):.0f} MiB > memory cap {memory_cap_mib:.0f} MiB'
        rows.append(row)
        if row.error:
            break
    return rows


@dataclass
class Scaling:
    """Growth exponents in the number of tokens (1 = linear, 2 = quadratic)."""

    variant: str
    sizes: str
    fwd_time: Optional[float]
    train_time: Optional[float]
    fwd_memory: Optional[float]
    train_memory: Optional[float]
    #: largest forward peak of one token mixer
    mixer_fwd_memory: Optional[float] = None
    stopped: str = ''


def scaling(variant: str, rows: Sequence[Row]) -> Scaling:
    mine = [r for r in rows if r.target.partition('@')[0] == variant]
    measured = [r for r in mine if r.fwd_ms is not None]

    def fit(key: str) -> Optional[float]:
        return growth_exponent([(tokens(int(r.shape.split('x')[0])), getattr(r, key))
                                for r in measured])
    return Scaling(variant, ' '.join(r.shape.split('x')[0] for r in measured),
                   fit('fwd_ms'), fit('train_ms'), fit('fwd_peak_mib'), fit('train_peak_mib'),
                   fit('fwd_mixer_peak_mib'), next((r.error for r in mine if r.error), ''))


"""One line of a benchmark report (:class:`Row`): a (target, input size,
dtype, runtime) with the measurements of its modes."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from .cases import TRAIN_MAC_FACTOR, Measurement


@dataclass
class Row:
    """One (target, input size) line of the report."""

    target: str
    shape: str
    device: str
    dtype: str
    params_m: float
    gmacs: float
    runtime: str = 'eager'
    #: median forward time; its spread (IQR) and timed iterations beside it
    fwd_ms: Optional[float] = None
    fwd_iqr_ms: Optional[float] = None
    fwd_runs: Optional[int] = None
    img_per_s: Optional[float] = None
    #: what the process pays: memory held between iterations + one's peak
    fwd_peak_mib: Optional[float] = None
    #: the part of ``fwd_peak_mib`` held between iterations
    fwd_held_mib: Optional[float] = None
    #: largest forward peak of one of the target's token mixers (its ``mixer``
    #: part), where it names them
    fwd_mixer_peak_mib: Optional[float] = None
    fwd_frac_peak: Optional[float] = None
    train_ms: Optional[float] = None
    train_iqr_ms: Optional[float] = None
    train_runs: Optional[int] = None
    train_peak_mib: Optional[float] = None
    train_held_mib: Optional[float] = None
    #: the first training step's peak above the built model
    train_first_peak_mib: Optional[float] = None
    train_frac_peak: Optional[float] = None
    train_cp_ms: Optional[float] = None
    train_cp_iqr_ms: Optional[float] = None
    train_cp_runs: Optional[int] = None
    train_cp_peak_mib: Optional[float] = None
    #: with_cp step time over the plain step's (:func:`.measure.measure`)
    cp_time_ratio: Optional[float] = None
    #: compiling runtimes: first forward / training step, compilation included
    fwd_compile_s: Optional[float] = None
    train_compile_s: Optional[float] = None
    #: forward outputs' largest deviation from eager fp32 (see :class:`.cases.Measurement`)
    max_dev: Optional[float] = None
    mm_gflops: Optional[float] = None
    threads: Optional[int] = None
    memory_method: str = ''
    load1: Optional[float] = None
    error: str = ''

    @property
    def cp_peak_change(self) -> Optional[float]:
        """Relative change of the training peak with with_cp (-0.6: 60 % less)."""
        if self.train_cp_peak_mib is None or not self.train_peak_mib:
            return None
        return self.train_cp_peak_mib / self.train_peak_mib - 1


#: the per-mode measurements of a row
MEASURED = ('fwd_ms', 'fwd_iqr_ms', 'fwd_runs', 'img_per_s', 'fwd_peak_mib', 'fwd_held_mib',
            'fwd_mixer_peak_mib', 'fwd_frac_peak', 'train_ms', 'train_iqr_ms', 'train_runs',
            'train_peak_mib', 'train_held_mib', 'train_first_peak_mib', 'train_frac_peak',
            'train_cp_ms', 'train_cp_iqr_ms', 'train_cp_runs', 'train_cp_peak_mib',
            'cp_time_ratio', 'fwd_compile_s', 'train_compile_s', 'max_dev')


def fill_row(row: Row, mode: str, m: Measurement) -> None:
    """Put the measurement ``m`` of ``mode`` into ``row`` (fraction of peak
    from the row's GMACs)."""
    factor = 1 if mode == 'fwd' else TRAIN_MAC_FACTOR
    frac = 2 * factor * row.gmacs / (m.latency_ms / 1e3) / m.mm_gflops
    if mode == 'fwd':
        row.fwd_ms, row.fwd_peak_mib, row.fwd_frac_peak = m.latency_ms, m.peak_mib, frac
        row.fwd_iqr_ms, row.fwd_runs = m.latency_iqr_ms, m.runs
        row.fwd_held_mib = m.held_mib
        row.img_per_s = 1e3 / m.latency_ms
        row.fwd_mixer_peak_mib = (m.part_peaks_mib or {}).get('mixer')
        row.fwd_compile_s, row.max_dev = m.compile_s, m.max_dev
    elif mode == 'train':
        row.train_ms, row.train_peak_mib, row.train_frac_peak = m.latency_ms, m.peak_mib, frac
        row.train_iqr_ms, row.train_runs = m.latency_iqr_ms, m.runs
        row.train_held_mib, row.train_first_peak_mib = m.held_mib, m.first_peak_mib
        row.train_compile_s = m.compile_s
    else:
        row.train_cp_ms, row.train_cp_peak_mib = m.latency_ms, m.peak_mib
        row.train_cp_iqr_ms, row.train_cp_runs = m.latency_iqr_ms, m.runs
        row.cp_time_ratio = m.cp_time_ratio
    row.mm_gflops = m.mm_gflops if row.mm_gflops is None else max(row.mm_gflops, m.mm_gflops)
    row.threads, row.memory_method = m.threads, m.memory_method
    row.load1 = m.load1 if row.load1 is None else max(row.load1, m.load1)


def merge_rows(rows: Iterable[Row]) -> list[Row]:
    """Combine rows of the same (model, input, device, dtype) from several
    runs (e.g. a forward-only and a training-only run): the first value of
    each column wins; ``mm_gflops`` / ``load1`` are the highest of the rows
    that gave a value; errors are joined."""
    merged: dict[tuple, Row] = {}
    for row in rows:
        key = (row.target, row.shape, row.device, row.dtype, row.runtime)
        if key not in merged:
            merged[key] = Row(**asdict(row))
            continue
        into = merged[key]
        taken = [name for name in MEASURED if getattr(into, name) is None
                 and getattr(row, name) is not None]
        for name in taken:
            setattr(into, name, getattr(row, name))
        if taken:
            into.mm_gflops = max(filter(None, (into.mm_gflops, row.mm_gflops)), default=None)
            into.load1 = max(filter(None, (into.load1, row.load1)), default=None)
        if row.error and row.error not in into.error:
            into.error = f'{into.error}; {row.error}'.lstrip('; ')
    return list(merged.values())


def series(row: Row) -> str:
    """The row's model with its runtime / dtype when not eager / fp32 (one
    line of a plot, one line of the growth table)."""
    extra = [v for v, plain in ((row.runtime, 'eager'), (row.dtype, 'fp32')) if v != plain]
    return ' '.join([row.target, *extra])


def pixels(shape: str) -> float:
    """Megapixels of an ``'HxW'`` shape."""
    h, w = shape.split('x')
    return int(h) * int(w) / 1e6

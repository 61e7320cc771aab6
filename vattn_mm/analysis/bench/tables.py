"""Benchmark reports: CSV files of :class:`.rows.Row`, the markdown table
with the speed-ups it derives, and growth exponents in the number of
tokens."""
from __future__ import annotations

import csv
import math
import statistics
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from .rows import Row, pixels, series

COLUMNS = [f.name for f in fields(Row)]
#: (value key, column title, format) of the markdown table, in order
_MD = [('target', 'model', '{}'), ('shape', 'input', '{}'),
       ('runtime', 'runtime', '{}'), ('dtype', 'dtype', '{}'),
       ('params_m', 'params (M)', '{:.1f}'), ('gmacs', 'GMACs', '{:.3g}'),
       ('fwd_ms', 'fwd (ms)', '{:.0f}'), ('fwd_iqr_ms', 'fwd IQR (ms)', '{:.1f}'),
       ('fwd_runs', 'fwd runs', '{}'), ('img_per_s', 'img/s', '{:.2f}'),
       ('fwd_vs_eager', 'fwd vs eager', '{:.2f}x'), ('fwd_vs_fp32', 'fwd vs fp32', '{:.2f}x'),
       ('max_dev', 'max dev vs fp32 eager', '{:.1e}'),
       ('fwd_compile_s', 'fwd compile (s)', '{:.1f}'),
       ('fwd_peak_mib', 'fwd peak (MiB)', '{:.0f}'), ('fwd_held_mib', 'fwd held (MiB)', '{:.0f}'),
       ('fwd_mixer_peak_mib', 'mixer fwd peak (MiB)', '{:.0f}'),
       ('fwd_frac_peak', 'fwd % of matmul peak', '{:.0%}'),
       ('train_ms', 'train step (ms)', '{:.0f}'),
       ('train_iqr_ms', 'train IQR (ms)', '{:.1f}'), ('train_runs', 'train runs', '{}'),
       ('train_peak_mib', 'train peak (MiB)', '{:.0f}'),
       ('train_held_mib', 'train held (MiB)', '{:.0f}'),
       ('train_first_peak_mib', '1st step peak (MiB)', '{:.0f}'),
       ('train_frac_peak', 'train % of matmul peak', '{:.0%}'),
       ('train_vs_eager', 'train vs eager', '{:.2f}x'),
       ('train_vs_fp32', 'train vs fp32', '{:.2f}x'),
       ('train_compile_s', 'train compile (s)', '{:.1f}'),
       ('train_cp_ms', 'with_cp step (ms)', '{:.0f}'),
       ('train_cp_iqr_ms', 'with_cp IQR (ms)', '{:.1f}'),
       ('train_cp_runs', 'with_cp runs', '{}'),
       ('train_cp_peak_mib', 'with_cp peak (MiB)', '{:.0f}'),
       ('cp_time_ratio', 'with_cp time', '{:.2f}x'),
       ('cp_peak_change', 'with_cp peak change', '{:+.0%}'),
       ('mm_gflops', 'mm GFLOP/s', '{:.0f}'), ('load1', 'load avg', '{:.1f}')]


def write_csv(rows: Iterable[Row], path: Path) -> None:
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: v for k, v in asdict(row).items() if k in COLUMNS})


def _parse(text: str, annotation: str) -> Any:
    if text == '':
        return '' if annotation == 'str' else None
    if 'float' in annotation:
        return float(text)
    return int(text) if 'int' in annotation else text


def read_csv(path: Path) -> list[Row]:
    """Rows written by :func:`write_csv` (columns a file lacks, such as the
    spread of files written before it was reported, stay empty)."""
    types = {f.name: str(f.type) for f in fields(Row)}
    with open(path, newline='') as f:
        return [Row(**{k: _parse(v, types[k]) for k, v in rec.items() if k in types})
                for rec in csv.DictReader(f)]


def _speedup(base: Optional[Row], row: Row, key: str) -> Optional[float]:
    """``base``'s time over ``row``'s (> 1: ``row`` is faster)."""
    if base is None or base is row or not getattr(base, key) or not getattr(row, key):
        return None
    return getattr(base, key) / getattr(row, key)


def report_values(rows: Sequence[Row]) -> list[dict]:
    """Each row's fields plus what the report derives: ``cp_peak_change`` and
    the speed-ups against the eager row (``*_vs_eager``) and the fp32 row
    (``*_vs_fp32``) of the same model, input, device and the other setting;
    ``runtime`` / ``dtype`` are None where every row is eager / fp32."""
    index = {(r.target, r.shape, r.device, r.dtype, r.runtime): r for r in rows}
    plain_runtime = all(r.runtime == 'eager' for r in rows)
    plain_dtype = all(r.dtype == 'fp32' for r in rows)
    out = []
    for row in rows:
        eager = index.get((row.target, row.shape, row.device, row.dtype, 'eager'))
        fp32 = index.get((row.target, row.shape, row.device, 'fp32', row.runtime))
        values = dict(asdict(row), cp_peak_change=row.cp_peak_change)
        values.update(runtime=None if plain_runtime else row.runtime,
                      dtype=None if plain_dtype else row.dtype)
        for mode in ('fwd', 'train'):
            values[f'{mode}_vs_eager'] = _speedup(eager, row, f'{mode}_ms')
            values[f'{mode}_vs_fp32'] = _speedup(fp32, row, f'{mode}_ms')
        out.append(values)
    return out


def markdown_row(cells: Iterable[Any]) -> str:
    """One row of a markdown table."""
    return '| ' + ' | '.join(map(str, cells)) + ' |'


def markdown(rows: Sequence[Row]) -> str:
    """The report as a markdown table (columns without data are left out)."""
    values = report_values(rows)
    cols = [c for c in _MD if any(v[c[0]] is not None for v in values)]
    lines = [markdown_row(c[1] for c in cols), '|' + '---|' * len(cols)]
    for v in values:
        lines.append(markdown_row(fmt.format(v[key]) if v[key] is not None else '-'
                                  for key, _, fmt in cols))
    errors = [f'- {series(r)} {r.shape}: {r.error.splitlines()[0]}' for r in rows if r.error]
    return '\n'.join(lines + ([''] + errors if errors else []))


#: what :func:`growth_markdown` fits against the number of pixels (tokens)
_GROWTH = [('fwd_ms', 'fwd time'), ('fwd_peak_mib', 'fwd memory'),
           ('train_ms', 'train time'), ('train_peak_mib', 'train memory')]


def growth_exponent(points: Sequence[tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of ``log(value)`` against ``log(size)``: 1 for a
    cost linear in the number of tokens, 2 for quadratic.  None for fewer
    than two sizes or non-positive values."""
    points = [(x, y) for x, y in points if x > 0 and y and y > 0]
    if len({x for x, _ in points}) < 2:
        return None
    logs = [(math.log(x), math.log(y)) for x, y in points]
    mx = statistics.fmean(x for x, _ in logs)
    my = statistics.fmean(y for _, y in logs)
    return (sum((x - mx) * (y - my) for x, y in logs)
            / sum((x - mx) ** 2 for x, _ in logs))


def growth_markdown(rows: Sequence[Row]) -> str:
    """For models measured at three or more sizes: the growth exponent of
    time and memory in the number of pixels (= tokens), over all sizes and
    over the two largest (``all / top``); empty when there are none."""
    lines = []
    for target in dict.fromkeys(series(r) for r in rows):
        mine = sorted((r for r in rows if series(r) == target), key=lambda r: pixels(r.shape))
        if len(mine) < 3:
            continue
        cells = []
        for key, _ in _GROWTH:
            pts = [(pixels(r.shape), getattr(r, key)) for r in mine]
            whole, top = growth_exponent(pts), growth_exponent(pts[-2:])
            cells.append('-' if whole is None else
                         f'{whole:.2f} / {top:.2f}' if top is not None else f'{whole:.2f}')
        lines.append(f'| {target} | {mine[0].shape} .. {mine[-1].shape} | ' + ' | '.join(cells)
                     + ' |')
    if not lines:
        return ''
    head = ['| model | inputs | ' + ' | '.join(label for _, label in _GROWTH) + ' |',
            '|' + '---|' * (2 + len(_GROWTH))]
    return ('Growth exponent in the number of tokens (1 = linear, 2 = quadratic; '
            'all sizes / two largest):\n\n' + '\n'.join(head + lines))

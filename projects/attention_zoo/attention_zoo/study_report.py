"""The zoo's report: the markdown tables, headlines, figures, the CSVs of
dataclasses, earlier runs read back, and the results section of projects/attention_zoo/README.md."""
from __future__ import annotations

import csv
import json
import shutil
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Sequence

from vattn_mm.analysis.bench import Row, read_csv
from .accuracy import TASKS, Accuracy, pareto_front, read_accuracy_csv
from .speed import Scaling

RESULTS_BEGIN, RESULTS_END = '<!-- zoo:results -->', '<!-- /zoo:results -->'


def earlier_runs(dirs: Sequence[Path], variants: Sequence[str]
                 ) -> tuple[list[Row], list[Accuracy]]:
    """Speed rows and accuracy runs of ``variants`` from the CSVs in
    ``dirs`` (``--out-dir`` of earlier runs): each variant's rows, and
    separately its runs, from the last directory that has any."""
    speed: dict[str, dict[Path, list]] = {}      # variant -> folder -> its rows there
    accuracy: dict[str, dict[Path, list]] = {}
    for folder in dirs:
        files = folder / 'zoo_speed.csv', folder / 'zoo_accuracy.csv'
        if not any(f.is_file() for f in files):
            raise FileNotFoundError(f'{folder}: neither zoo_speed.csv nor zoo_accuracy.csv')
        if files[0].is_file():
            for row in read_csv(files[0]):
                variant = row.target.partition('@')[0]
                speed.setdefault(variant, {}).setdefault(folder, []).append(row)
        if files[1].is_file():
            for run in read_accuracy_csv(files[1]):
                accuracy.setdefault(run.variant, {}).setdefault(folder, []).append(run)
    def last(found: dict) -> list:
        return list(found.values())[-1] if found else []
    return ([r for v in variants for r in last(speed.get(v, {}))],
            [r for v in variants for r in last(accuracy.get(v, {}))])


def _fmt(value: Any, spec: str) -> str:
    return '-' if value is None or value == '' else format(value, spec)


def _side(row: Row) -> int:
    return int(row.shape.split('x')[0])


def _speed_tables(rows: Sequence[Row], scales: Sequence[Scaling],
                  ref_size: int) -> list[str]:
    by = {(r.target.partition('@')[0], _side(r)): r for r in rows}
    lines = [f'Backbone + FPN at {ref_size}x{ref_size}, batch 1:', '',
             '| variant | params (M) | GMACs | fwd (ms) | train step (ms) | fwd peak (MiB) '
             '| mixer fwd peak (MiB) | train peak (MiB) | fwd % of matmul peak '
             '| train % of matmul peak |',
             '|---|---|---|---|---|---|---|---|---|---|']
    for s in scales:
        r = by.get((s.variant, ref_size))
        if r is not None:
            lines.append(f'| {s.variant} | {r.params_m:.1f} | {r.gmacs:.2f} | '
                         f'{_fmt(r.fwd_ms, ".0f")} | {_fmt(r.train_ms, ".0f")} | '
                         f'{_fmt(r.fwd_peak_mib, ".0f")} | '
                         f'{_fmt(r.fwd_mixer_peak_mib, ".0f")} | '
                         f'{_fmt(r.train_peak_mib, ".0f")} | '
                         f'{_fmt(r.fwd_frac_peak, ".0%")} | {_fmt(r.train_frac_peak, ".0%")} |')
    sizes = sorted({_side(r) for r in rows})
    lines += ['', 'Forward latency (ms) by input side; growth exponents of time and peak memory '
              'in the number of tokens (least squares, log-log; 1 = linear, 2 = quadratic):', '',
              '| variant | ' + ' | '.join(map(str, sizes)) + ' | fwd time exp. | train time '
              'exp. | fwd memory exp. | mixer fwd memory exp. | train memory exp. | stopped |',
              '|---|' + '---|' * (len(sizes) + 6)]
    for s in scales:
        cells = [_fmt(by[s.variant, z].fwd_ms, '.0f') if (s.variant, z) in by else '-'
                 for z in sizes]
        exps = [_fmt(v, '.2f') for v in (s.fwd_time, s.train_time, s.fwd_memory,
                                         s.mixer_fwd_memory, s.train_memory)]
        lines.append(f'| {s.variant} | ' + ' | '.join(cells + exps)
                     + f' | {s.stopped.replace("|", "/") or "-"} |')
    return lines


def _accuracy_table(acc: dict, runs: Sequence[Accuracy]) -> list[str]:
    names = list(dict.fromkeys(r.variant for r in runs))
    metric_names = [name for _, keys in TASKS.values() for name in keys.values()]
    lines = ['Demo-data accuracy (synthetic shapes, NOT ImageNet / COCO / ADE20K accuracy): '
             'mean over seeds, spread = max - min:', '',
             '| variant | ' + ' | '.join(metric_names) + ' | runs |',
             '|---|' + '---|' * (len(metric_names) + 1)]
    for n in names:
        cells = [f'{acc[n, m][0]:.3g} ± {acc[n, m][1]:.2g}' if (n, m) in acc else '-'
                 for m in metric_names]
        count = sum(1 for r in runs if r.variant == n and not r.error)
        lines.append(f'| {n} | ' + ' | '.join(cells) + f' | {count} |')
    return lines


def report(rows: Sequence[Row], scales: Sequence[Scaling], acc: dict,
           runs: Sequence[Accuracy], ref_size: int, headline: dict, how: str) -> str:
    """The markdown tables of a run."""
    lines = [f'Measured: {how}.']
    if headline:
        lines += [''] + [f'- {k}: {v}' for k, v in headline.items()]
    if rows:
        lines += [''] + _speed_tables(rows, scales, ref_size)
    if runs:
        lines += [''] + _accuracy_table(acc, runs)
    failed = [f'- {r.variant} {r.task} seed {r.seed}: {r.error}' for r in runs if r.error]
    return '\n'.join(lines + ([''] + failed if failed else []))


def headlines(rows: Sequence[Row], scales: Sequence[Scaling], acc: dict,
              small: int, large: int) -> dict:
    """Fastest at the smallest / largest size, most linear, most accurate per ms."""
    out = {}
    for size in (small, large):
        timed = [r for r in rows if r.shape == f'{size}x{size}' and r.fwd_ms]
        if timed:
            best = min(timed, key=lambda r: r.fwd_ms)
            out[f'fastest forward at {size}x{size}'] = (
                f'{best.target.partition("@")[0]} ({best.fwd_ms:.0f} ms)')
    fitted = [s for s in scales if s.fwd_time is not None]
    if fitted:
        best = min(fitted, key=lambda s: abs(s.fwd_time - 1))
        out['closest to linear (forward time)'] = f'{best.variant} (exponent {best.fwd_time:.2f})'
        linear = [s.variant for s in fitted if s.fwd_time <= 1.05]
        out['forward time exponent <= 1.05'] = ', '.join(linear) or '-'
    for (_, keys) in TASKS.values():
        name = next(iter(keys.values()))
        per_ms = {v: acc[v, name][0] / r.fwd_ms for (v, m) in acc if m == name
                  for r in rows if r.target.partition('@')[0] == v
                  and r.shape == f'{small}x{small}' and r.fwd_ms}
        if per_ms:
            best = max(per_ms, key=per_ms.get)
            out[f'most {name} per forward ms at {small}x{small}'] = best
    return out


def plot(rows: Sequence[Row], acc: dict, ref_size: int, out: Path) -> list[Path]:
    """Latency and memory vs input side (log-log), accuracy vs latency with
    the Pareto front."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    names = list(dict.fromkeys(r.target.partition('@')[0] for r in rows))
    paths = []
    for panels, label, stem in (
            ((('fwd_ms', 'forward'), ('train_ms', 'training step')), 'latency (ms)', 'zoo_latency'),
            ((('fwd_peak_mib', 'forward'), ('fwd_mixer_peak_mib', 'one token mixer, forward'),
              ('train_peak_mib', 'training step')), 'peak memory (MiB)', 'zoo_memory')):
        fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8))
        for ax, (key, title) in zip(axes, panels):
            for n in names:
                pts = [(int(r.shape.split('x')[0]), getattr(r, key)) for r in rows
                       if r.target.partition('@')[0] == n and getattr(r, key)]
                if pts:
                    ax.plot(*zip(*pts), marker='o', label=n)
            ax.set_xscale('log', base=2)
            ax.set_yscale('log')
            ax.set_xlabel('input side (pixels, square)')
            ax.set_ylabel(f'{title} {label}')
            ax.grid(alpha=0.3, which='both')
        axes[0].legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(out / f'{stem}.png')
        fig.savefig(paths[-1], dpi=90)
        plt.close(fig)
    metrics = [name for _, keys in TASKS.values() for name in list(keys.values())[:1]]
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 4.8))
    latency = {r.target.partition('@')[0]: r.fwd_ms for r in rows
               if r.shape == f'{ref_size}x{ref_size}' and r.fwd_ms}
    for ax, metric in zip(axes, metrics):
        points = {n: (latency[n], acc[n, metric][0]) for n in names
                  if n in latency and (n, metric) in acc}
        for n, (t, a) in points.items():
            ax.scatter(t, a)
            ax.annotate(n, (t, a), fontsize=7)
        front = pareto_front(points)
        if front:
            ax.plot([points[n][0] for n in front], [points[n][1] for n in front], 'k--',
                    label='Pareto front')
            ax.legend(fontsize=8)
        ax.set_xlabel(f'forward latency at {ref_size}x{ref_size} (ms)')
        ax.set_ylabel(f'demo {metric}')
        ax.grid(alpha=0.3)
    fig.tight_layout()
    paths.append(out / 'zoo_accuracy.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return paths


def write_dataclass_csv(items: Sequence[Any], path: Path, cls: type) -> None:
    """``items`` (instances of dataclass ``cls``) as a CSV, dict fields as JSON."""
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow([fl.name for fl in fields(cls)])
        for item in items:
            d = asdict(item)
            writer.writerow([json.dumps(d[fl.name]) if isinstance(d[fl.name], dict)
                             else d[fl.name] for fl in fields(cls)])


def update_page(page: Path, table: str, figures: Sequence[Path],
                markers: tuple[str, str] = (RESULTS_BEGIN, RESULTS_END)) -> None:
    """Replace what lies between the page's ``markers`` (default the results
    section's); copy the figures next to the page."""
    begin, end = markers
    text = page.read_text()
    if begin not in text or end not in text:
        raise ValueError(f'{page} has no {begin} ... {end} section')
    links = []
    for fig in figures:
        shutil.copyfile(fig, page.parent / fig.name)
        links.append(f'![{fig.stem}]({fig.name})')
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f'{head}{begin}\n{table}\n\n' + '\n'.join(links) + f'\n{end}{tail}')

"""The attention zoo (docs/zoo.md): every token mixer in one macro
architecture (``configs/_base_/backbones/zoo_*.py``), measured the same way.

    python tools/analysis/zoo.py --docs docs/zoo.md            # the full run (2-core CPU)
    python tools/analysis/zoo.py --device cuda --dtype bf16    # CUDA, bf16 autocast
    python tools/analysis/zoo.py --quick --variants sra hilo   # tiny widths, a smoke run
    python tools/analysis/zoo.py --matching                    # the cost-matching table
    python tools/analysis/zoo.py --report-from work_dirs/zoo work_dirs/zoo2 --docs docs/zoo.md

Per variant, backbone + FPN neck (mmdet ``FPN``, 256 channels, 5 outputs),
batch 1:

* **cost**: parameters and GMACs at 224x224 and at each swept size
  (:func:`vattn_mm.analysis.count_complexity`);
* **speed**: forward and training-step latency, peak memory (also the
  largest peak of one token mixer's forward: the stride-4 ConvFFN sets the
  whole model's forward peak, the same in every variant) and fraction of
  the matmul peak at each size of ``--sizes`` (square, ascending; the
  training step up to ``--train-max-size``), measured by
  ``benchlib`` (a timing and a memory process per variant); a variant
  stops at the first size whose peak memory or iteration time, extrapolated
  from the sizes before it, would pass ``--memory-cap-mib`` or
  ``--time-cap-s``, or whose run fails or passes ``--case-timeout``
  (recorded in the CSV's ``error`` column); the growth exponents of time and
  memory in the number of tokens are least-squares slopes in log-log;
* **accuracy**: each variant trained from scratch with the same schedule on
  the embedded demo data, UperNet (mIoU) and Mask R-CNN (box / mask AP),
  ``configs/zoo/<variant>_{upernet,maskrcnn}_demo.py``, once per seed (a
  fresh process each: train, then test).

Writes to ``--out-dir``: ``zoo_speed.csv``, ``zoo_scaling.csv``,
``zoo_accuracy.csv``, ``zoo.md`` (the tables), ``zoo_latency.png``,
``zoo_memory.png``, ``zoo_accuracy.png`` and the training logs under
``runs/`` (checkpoints deleted).  ``--docs PAGE`` also puts the
tables between the page's ``<!-- zoo:results -->`` markers and copies the
figures next to it.
"""
from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional, Sequence

import benchlib

ROOT = Path(__file__).resolve().parents[2]
FRAGMENTS = ROOT / 'configs' / '_base_' / 'backbones'
TASK_CONFIGS = ROOT / 'configs' / 'zoo'
#: the variant every other one is matched to
REFERENCE = 'sra'
#: quick mode: tiny widths, one block per stage (mixer settings unchanged)
QUICK_ARCH = dict(embed_dims=[32, 64, 96, 128], depths=[1, 1, 1, 1], num_heads=[1, 2, 3, 4],
                  mlp_ratios=[2, 2, 2, 2])
FPN_CHANNELS, QUICK_FPN_CHANNELS = 256, 32
FULL_SIZES = (256, 512, 1024, 2048)
FULL_TRAIN_MAX_SIZE = 1024
#: demo training iterations per run (60 runs: 15 variants x 2 tasks x 2 seeds)
FULL_TRAIN_ITERS = 60
QUICK_SIZES = (64, 96)
#: task -> (config suffix, metric keys reported by the evaluator, short names)
TASKS = {
    'seg': ('upernet_demo', {'mIoU': 'mIoU'}),
    'det': ('maskrcnn_demo', {'coco/bbox_mAP': 'box AP', 'coco/segm_mAP': 'mask AP'}),
}
RESULTS_BEGIN, RESULTS_END = '<!-- zoo:results -->', '<!-- /zoo:results -->'


def variants() -> list[str]:
    """Every zoo variant (a ``zoo_<name>.py`` fragment), the reference first."""
    names = sorted(p.stem[4:] for p in FRAGMENTS.glob('zoo_*.py') if p.stem != 'zoo_common')
    return sorted(names, key=lambda n: n != REFERENCE)


def _split(spec: str) -> tuple[str, bool]:
    name, _, mode = spec.partition('@')
    if name not in variants():
        raise ValueError(f'unknown zoo variant {name!r}; choose from {variants()}')
    if mode not in ('', 'quick'):
        raise ValueError(f'bad zoo spec {spec!r}: use <variant> or <variant>@quick')
    return name, mode == 'quick'


def backbone_config(spec: str) -> dict:
    """The backbone config of ``'<variant>'`` or ``'<variant>@quick'``
    (tiny widths, :data:`QUICK_ARCH`)."""
    from mmengine.config import Config
    name, quick = _split(spec)
    cfg = Config.fromfile(str(FRAGMENTS / f'zoo_{name}.py')).backbone.to_dict()
    cfg.pop('init_cfg', None)
    if quick:
        cfg['arch'] = dict(QUICK_ARCH)
    return cfg


def build_zoo_target(spec: str, *, with_cp: bool = False, device: Any = 'cpu',
                     init: bool = True):
    """Backbone + FPN neck of a zoo variant as a :class:`vattn_mm.analysis.Target`
    (the ``benchlib`` builder of the speed cases); ``init=False``: without the
    backbone's weight initialisation (for counting on fake tensors)."""
    import torch
    from mmdet.models.necks import FPN
    from torch import nn

    from vattn_mm.analysis import Target
    from vattn_mm.backbones import TokenPyramid
    from vattn_mm.layers import TokenBlock
    cfg = backbone_config(spec)
    kind = cfg.pop('type')
    if kind != 'TokenPyramid':
        raise ValueError(f'zoo variant {spec!r} must build a TokenPyramid, its fragment '
                         f'says {kind!r}')
    quick = _split(spec)[1]
    with torch.device(device):
        backbone = TokenPyramid(**cfg, with_cp=with_cp)
        if init:
            backbone.init_weights()
        neck = FPN(backbone.out_channels, QUICK_FPN_CHANNELS if quick else FPN_CHANNELS, 5)
        model = nn.ModuleDict(dict(backbone=backbone, neck=neck))
    return Target(spec, model, lambda images: neck(backbone(images)),
                  parts=dict(mixer=[b.attn for b in backbone.modules()
                                    if isinstance(b, TokenBlock) and b.has_mixer]))


def complexity(spec: str, size: int, part: str = '') -> tuple[float, float]:
    """(parameters in M, GMACs) of backbone + FPN (``part='backbone'``: the
    backbone alone) at ``size`` x ``size``: shape-only on fake tensors, or a
    real forward where a mixer picks by value (data-dependent shapes)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vattn_mm.analysis import count_params, model_complexity

    def count() -> tuple[float, float]:
        target = build_zoo_target(spec, init=False)
        cx = model_complexity(target, (size, size))
        if not part:
            return cx.params / 1e6, cx.macs / 1e9
        module = target.model[part]
        return count_params(module) / 1e6, cx.by_module.get(f'ModuleDict.{part}', 0) / 1e9
    try:
        with FakeTensorMode():
            return count()
    except Exception:  # noqa: BLE001  (data-dependent ops cannot run on fake tensors)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return count()


def matching_table(size: int = 224) -> str:
    """Markdown: parameters and GMACs of every variant's backbone at ``size``
    and their difference from the reference's."""
    ref = complexity(REFERENCE, size, 'backbone')
    lines = ['| variant | mixer | params (M) | vs reference | GMACs | vs reference |',
             '|---|---|---|---|---|---|']
    for name in variants():
        params, gmacs = complexity(name, size, 'backbone')
        mixer = backbone_config(name)['mixer']
        kind = (mixer[0] if isinstance(mixer, list) else mixer)['type']
        lines.append(f'| {name} | `{kind}` | {params:.2f} | {params / ref[0] - 1:+.1%} | '
                     f'{gmacs:.3f} | {gmacs / ref[1] - 1:+.1%} |')
    return '\n'.join(lines)


# ------------------------------------------------------------------ speed
def tokens(size: int) -> int:
    """Stage-1 tokens (stride 4) of a ``size`` x ``size`` input."""
    return math.ceil(size / 4) ** 2


def _extrapolate(rows: Sequence[benchlib.Row], size: int, key: str) -> Optional[float]:
    """``key`` at ``size`` from the last two sizes that measured it (power
    law in the tokens, at least linear); None before two sizes."""
    pts = [(tokens(int(r.shape.split('x')[0])), getattr(r, key)) for r in rows
           if getattr(r, key)]
    if len(pts) < 2:
        return None
    (x0, y0), (x1, y1) = pts[-2:]
    slope = math.log(y1 / y0) / math.log(x1 / x0) if x1 != x0 and y0 > 0 else 1.0
    return y1 * (tokens(size) / x1) ** max(slope, 1.0)


def predicted_peak(rows: Sequence[benchlib.Row], size: int,
                   modes: Sequence[str] = benchlib.DEFAULT_MODES) -> Optional[float]:
    """Peak MiB at ``size`` of the largest of ``modes`` (training, else
    forward), extrapolated."""
    keys = ('train_peak_mib', 'fwd_peak_mib') if 'train' in modes else ('fwd_peak_mib', )
    return next((p for p in (_extrapolate(rows, size, k) for k in keys) if p is not None), None)


def predicted_latency_s(rows: Sequence[benchlib.Row], size: int,
                        modes: Sequence[str]) -> Optional[float]:
    """Seconds of the slowest of ``modes`` at ``size``, extrapolated."""
    guesses = [_extrapolate(rows, size, f'{m}_ms') for m in modes]
    guesses = [g / 1e3 for g in guesses if g is not None]
    return max(guesses) if guesses else None


def sweep(spec: str, sizes: Sequence[int], modes: Sequence[str], *, memory_cap_mib: float,
          case_timeout: float, train_max_size: Optional[int] = None,
          time_cap_s: Optional[float] = None, **case_kwargs) -> list[benchlib.Row]:
    """One :class:`benchlib.Row` per size of ``spec`` until the memory cap
    or, if given, the time cap (seconds per iteration, extrapolated like the
    peak); the training step only up to ``train_max_size`` (None: every
    size).  The cases of a variant share a timing and a memory process
    (:class:`benchlib.CaseWorkers`)."""
    with benchlib.CaseWorkers() as workers:
        return _sweep(workers, spec, sizes, modes, memory_cap_mib, time_cap_s, case_timeout,
                      train_max_size, case_kwargs)


def _sweep(workers: benchlib.CaseWorkers, spec: str, sizes: Sequence[int],
           modes: Sequence[str], memory_cap_mib: float, time_cap_s: Optional[float],
           case_timeout: float, train_max_size: Optional[int],
           case_kwargs: dict) -> list[benchlib.Row]:
    rows: list[benchlib.Row] = []
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
        row = benchlib.Row(spec, f'{size}x{size}', case_kwargs.get('device', 'cpu'),
                           case_kwargs.get('dtype', 'fp32'), params, gmacs, error=stop)
        if stop:
            rows.append(row)
            break
        for mode in modes_here:
            case = benchlib.Case(spec, (size, size), mode, builder='zoo:build_zoo_target',
                                 **case_kwargs)
            try:
                benchlib.fill_row(row, mode, workers.run_case(case, timeout=case_timeout))
            except (RuntimeError, subprocess.TimeoutExpired) as err:
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


def scaling(variant: str, rows: Sequence[benchlib.Row]) -> Scaling:
    mine = [r for r in rows if r.target.partition('@')[0] == variant]
    measured = [r for r in mine if r.fwd_ms is not None]

    def fit(key: str) -> Optional[float]:
        return benchlib.growth_exponent([(tokens(int(r.shape.split('x')[0])), getattr(r, key))
                                for r in measured])
    return Scaling(variant, ' '.join(r.shape.split('x')[0] for r in measured),
                   fit('fwd_ms'), fit('train_ms'), fit('fwd_peak_mib'), fit('train_peak_mib'),
                   fit('fwd_mixer_peak_mib'), next((r.error for r in mine if r.error), ''))


# --------------------------------------------------------------- accuracy
@dataclass
class Accuracy:
    """One training run of a variant on one demo task."""

    variant: str
    task: str
    seed: int
    metrics: dict
    train_s: float = 0.
    error: str = ''


def data_options(task: str, root: Path) -> dict:
    """``--cfg-options`` pointing a demo config at the demo data under ``root``."""
    if task == 'det':
        coco = f'{root}/coco/'
        opts = {f'{split}_dataloader.dataset.data_root': coco
                for split in ('train', 'val', 'test')}
        return opts | {f'{split}_evaluator.ann_file': f'{coco}annotations/instances_val.json'
                       for split in ('val', 'test')}
    return {f'{split}_dataloader.dataset.data_root': f'{root}/ade/'
            for split in ('train', 'val', 'test')}


def train_options(task: str, root: Path, iters: int, seed: int, quick: bool) -> dict:
    """The zoo's schedule: the demo recipe with ``iters`` iterations (warm-up
    and decay rescaled), one seed, no validation during training."""
    opts = data_options(task, root)
    warmup = max(1, iters // 10)
    opts.update({
        'train_cfg.max_iters': iters, 'train_cfg.val_interval': iters + 1,
        'param_scheduler.0.end': warmup, 'param_scheduler.1.begin': warmup,
        'param_scheduler.1.end': iters, 'randomness.seed': seed,
        'default_hooks.checkpoint.interval': iters, 'default_hooks.logger.interval': 10,
        'train_dataloader.num_workers': 0, 'train_dataloader.persistent_workers': False,
        'test_dataloader.num_workers': 0, 'test_dataloader.persistent_workers': False,
        'val_dataloader.num_workers': 0, 'val_dataloader.persistent_workers': False})
    if quick:
        opts['train_dataloader.batch_size'] = 2     # tiny widths: set by the worker
    return opts


def _train_worker(spec: dict) -> dict:
    """Train and test one (variant, task, seed) in this process."""
    import time

    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import torch

    import vattn_mm  # noqa: F401  (registers the backbones and the runner)
    from vattn_mm.utils.launch import load_config, use_protections
    if spec.get('threads'):
        torch.set_num_threads(spec['threads'])
    config = TASK_CONFIGS / f'{spec["variant"]}_{TASKS[spec["task"]][0]}.py'
    cfg = load_config(str(config), train_options(spec['task'], Path(spec['data_root']),
                                                 spec['iters'], spec['seed'], spec['quick']),
                      spec['work_dir'])
    if spec['quick']:
        dims = QUICK_ARCH['embed_dims']
        cfg.model.backbone.arch = dict(QUICK_ARCH)
        if spec['task'] == 'det':
            cfg.model.neck.in_channels = list(dims)
        else:
            cfg.model.decode_head.in_channels = list(dims)
            cfg.model.auxiliary_head.in_channels = dims[2]
    use_protections(cfg)
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    start = time.perf_counter()
    runner.train()
    train_s = time.perf_counter() - start
    metrics = runner.test()
    return dict(metrics={k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real)},
                train_s=train_s)


def train_and_test(variant: str, task: str, seed: int, *, data_root: Path, iters: int,
                   quick: bool, work_dir: Path, timeout: Optional[float],
                   threads: Optional[int] = None) -> Accuracy:
    """:func:`_train_worker` in a fresh process (a crash costs one run) with
    ``threads`` torch threads (None: torch's default)."""
    run_dir = work_dir / f'{variant}_{task}_seed{seed}'
    spec = dict(variant=variant, task=task, seed=seed, data_root=str(data_root), iters=iters,
                quick=quick, work_dir=str(run_dir), threads=threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), '--train-worker', json.dumps(spec)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                             timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Accuracy(variant, task, seed, {}, error=f'timed out after {timeout:.0f} s')
    finally:
        for ckpt in run_dir.rglob('*.pth'):      # the logs stay; checkpoints add up
            ckpt.unlink()
    if res.returncode:
        lines = res.stderr.strip().splitlines()
        return Accuracy(variant, task, seed, {},
                        error=f'exit {res.returncode}: {lines[-1] if lines else "no output"}')
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return Accuracy(variant, task, seed, out['metrics'], out['train_s'])


def accuracy_runs(args: argparse.Namespace, root: Path, out: Path) -> list[Accuracy]:
    """Every (variant, task, seed) trained and tested, ``args.jobs`` at a time;
    ``zoo_accuracy.csv`` rewritten (in the order of the runs) as each ends."""
    jobs = [(variant, task, seed) for variant in args.variants for task in TASKS
            for seed in args.seeds]
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    done: dict = {}

    def run(job: tuple) -> Accuracy:
        variant, task, seed = job
        print(f'[zoo] accuracy: {variant} {task} seed {seed}', flush=True)
        return train_and_test(variant, task, seed, data_root=root, quick=args.quick,
                              iters=args.seg_iters if task == 'seg' else args.det_iters,
                              work_dir=out / 'runs', timeout=args.train_timeout,
                              threads=threads)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run, job): job for job in jobs}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            write_dataclass_csv([done[j] for j in jobs if j in done],
                                out / 'zoo_accuracy.csv', Accuracy)
    return [done[j] for j in jobs]


def read_accuracy_csv(path: Path) -> list[Accuracy]:
    """The runs :func:`accuracy_runs` wrote to ``path``."""
    import csv
    with open(path, newline='') as f:
        return [Accuracy(r['variant'], r['task'], int(r['seed']), json.loads(r['metrics']),
                         float(r['train_s'] or 0), r['error']) for r in csv.DictReader(f)]


def earlier_runs(dirs: Sequence[Path], variants: Sequence[str]
                 ) -> tuple[list[benchlib.Row], list[Accuracy]]:
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
            for row in benchlib.read_csv(files[0]):
                variant = row.target.partition('@')[0]
                speed.setdefault(variant, {}).setdefault(folder, []).append(row)
        if files[1].is_file():
            for run in read_accuracy_csv(files[1]):
                accuracy.setdefault(run.variant, {}).setdefault(folder, []).append(run)
    def last(found: dict) -> list:
        return list(found.values())[-1] if found else []
    return ([r for v in variants for r in last(speed.get(v, {}))],
            [r for v in variants for r in last(accuracy.get(v, {}))])


def summarize_accuracy(runs: Sequence[Accuracy]) -> dict:
    """``{(variant, metric name): (mean, spread = max - min, runs)}``."""
    out: dict = {}
    for task, (_, keys) in TASKS.items():
        for variant in dict.fromkeys(r.variant for r in runs):
            done = [r for r in runs if r.variant == variant and r.task == task and not r.error]
            for key, name in keys.items():
                values = [r.metrics[key] for r in done if key in r.metrics]
                if values:
                    out[variant, name] = (sum(values) / len(values), max(values) - min(values),
                                          len(values))
    return out


def pareto_front(points: dict) -> list:
    """Names of the points ``{name: (latency, accuracy)}`` that no other point
    beats on both (lower latency, higher accuracy), by latency."""
    front = [n for n, (t, a) in points.items()
             if not any(t2 <= t and a2 >= a and (t2, a2) != (t, a)
                        for m, (t2, a2) in points.items() if m != n)]
    return sorted(front, key=lambda n: points[n][0])


# -------------------------------------------------------------- reporting
def _fmt(value: Any, spec: str) -> str:
    return '-' if value is None or value == '' else format(value, spec)


def _side(row: benchlib.Row) -> int:
    return int(row.shape.split('x')[0])


def _speed_tables(rows: Sequence[benchlib.Row], scales: Sequence[Scaling],
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


def report(rows: Sequence[benchlib.Row], scales: Sequence[Scaling], acc: dict,
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


def headlines(rows: Sequence[benchlib.Row], scales: Sequence[Scaling], acc: dict,
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


def plot(rows: Sequence[benchlib.Row], acc: dict, ref_size: int, out: Path) -> list[Path]:
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
    import csv
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow([fl.name for fl in fields(cls)])
        for item in items:
            d = asdict(item)
            writer.writerow([json.dumps(d[fl.name]) if isinstance(d[fl.name], dict)
                             else d[fl.name] for fl in fields(cls)])


def update_page(page: Path, table: str, figures: Sequence[Path]) -> None:
    """Replace what lies between the page's result markers; copy the figures
    next to the page."""
    text = page.read_text()
    if RESULTS_BEGIN not in text or RESULTS_END not in text:
        raise ValueError(f'{page} has no {RESULTS_BEGIN} ... {RESULTS_END} section')
    links = []
    for fig in figures:
        shutil.copyfile(fig, page.parent / fig.name)
        links.append(f'![{fig.stem}]({fig.name})')
    head, rest = text.split(RESULTS_BEGIN, 1)
    _, tail = rest.split(RESULTS_END, 1)
    page.write_text(f'{head}{RESULTS_BEGIN}\n{table}\n\n' + '\n'.join(links)
                    + f'\n{RESULTS_END}{tail}')


# ------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Measure the attention zoo (docs/zoo.md)')
    parser.add_argument('--variants', nargs='+', help=f'default: all ({", ".join(variants())})')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: tiny widths, sizes 64 and 96, 2 training iterations on a '
                             'small demo set, 1 seed')
    parser.add_argument('--parts', nargs='+', choices=('speed', 'accuracy'),
                        default=['speed', 'accuracy'])
    parser.add_argument('--sizes', nargs='+', type=int,
                        help=f'square input sides, ascending (default {list(FULL_SIZES)})')
    parser.add_argument('--ref-size', type=int,
                        help='size of the summary table and the accuracy-vs-latency plot '
                             '(default 512; quick: the smallest size)')
    parser.add_argument('--train-max-size', type=int,
                        help=f'largest side of the training-step cases (default '
                             f'{FULL_TRAIN_MAX_SIZE}; quick: every size); larger sizes: forward '
                             'only')
    parser.add_argument('--device', default='cpu', help='cpu, cuda or cuda:N')
    parser.add_argument('--dtype', choices=('fp32', 'bf16'), default='fp32',
                        help='bf16: autocast (refused where the device has no bf16 support)')
    parser.add_argument('--memory-cap-mib', type=float, default=8192,
                        help='stop a variant before a size whose peak would pass this')
    parser.add_argument('--time-cap-s', type=float, default=60,
                        help='stop a variant before a size whose iteration would take longer '
                             '(extrapolated from the sizes before it)')
    parser.add_argument('--case-timeout', type=float, default=600,
                        help='seconds one speed case may take before the variant stops')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--iters', type=int, default=2,
                        help='timed iterations per case (after the warm-up)')
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--seeds', nargs='+', type=int, help='default 0 1 (quick: 0)')
    parser.add_argument('--seg-iters', type=int,
                        help=f'UperNet demo iterations (default {FULL_TRAIN_ITERS})')
    parser.add_argument('--det-iters', type=int,
                        help=f'Mask R-CNN demo iterations (default {FULL_TRAIN_ITERS})')
    parser.add_argument('--data-root', default='data/demo',
                        help='demo data (written by tools/make_demo_data.py; made if missing)')
    parser.add_argument('--train-timeout', type=float, default=3600)
    parser.add_argument('--jobs', type=int,
                        help='training runs at a time, each with CPU cores / jobs threads '
                             '(default: 2 where there are 2 or more cores, else 1); the speed '
                             'part always runs one case at a time')
    parser.add_argument('--out-dir', default='work_dirs/zoo')
    parser.add_argument('--docs', type=Path, help='also write the tables into this page')
    parser.add_argument('--report-from', nargs='+', type=Path, metavar='DIR',
                        help='measure nothing: rebuild the CSVs, tables and plots from earlier '
                             'runs (their --out-dir; same options); a variant\'s speed rows and '
                             'its accuracy runs come from the last DIR that has them')
    parser.add_argument('--matching', action='store_true',
                        help='measure nothing: print the parameters / GMACs table at 224x224 '
                             '(backbones, vs the reference)')
    parser.add_argument('--train-worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train_worker or args.matching:
        return args
    known = variants()
    args.variants = args.variants or known
    unknown = sorted(set(args.variants) - set(known))
    if unknown:
        parser.error(f'unknown variants {unknown}; choose from {known}')
    args.sizes = args.sizes or list(QUICK_SIZES if args.quick else FULL_SIZES)
    if args.sizes != sorted(args.sizes) or min(args.sizes) < 32:
        parser.error('--sizes must be ascending sides of at least 32 pixels')
    if args.train_max_size is None and not args.quick:
        args.train_max_size = FULL_TRAIN_MAX_SIZE
    args.ref_size = args.ref_size or (args.sizes[0] if args.quick else 512)
    if 'speed' in args.parts and args.ref_size not in args.sizes:
        parser.error(f'--ref-size {args.ref_size} is not one of --sizes {args.sizes}')
    args.seeds = args.seeds or ([0] if args.quick else [0, 1])
    args.jobs = args.jobs or min(2, os.cpu_count() or 1)
    if args.jobs < 1:
        parser.error('--jobs must be >= 1')
    args.seg_iters = args.seg_iters or (2 if args.quick else FULL_TRAIN_ITERS)
    args.det_iters = args.det_iters or (2 if args.quick else FULL_TRAIN_ITERS)
    if args.device.startswith('cuda'):
        import torch
        if not torch.cuda.is_available():
            parser.error('--device cuda but no CUDA device is available')
        if args.dtype == 'bf16' and not torch.cuda.is_bf16_supported():
            parser.error('--dtype bf16: this CUDA device has no bf16 support')
    if args.docs is not None and not args.docs.is_file():
        parser.error(f'--docs: no such page {args.docs}')
    return args


def _demo_data(args: argparse.Namespace, out: Path) -> Path:
    root = Path(args.data_root)
    if args.quick:
        root = out / 'demo_data'
    if not (root / 'coco' / 'annotations' / 'instances_val.json').is_file():
        from vattn_mm.datasets import make_demo_dataset
        sizes = dict(num_train=8, num_val=4, size=128) if args.quick else {}
        make_demo_dataset(root, **sizes)
    return root.resolve()


def measure(args: argparse.Namespace, out: Path) -> tuple[list[benchlib.Row], list[Accuracy]]:
    """The speed sweep and the accuracy runs that ``args`` asks for; the
    CSVs are written as they progress."""
    suffix = '@quick' if args.quick else ''
    rows: list[benchlib.Row] = []
    if 'speed' in args.parts:
        case_kwargs = dict(device=args.device, dtype=args.dtype, warmup=args.warmup,
                           iters=args.iters, threads=args.threads)
        for variant in args.variants:
            print(f'[zoo] speed: {variant}', flush=True)
            rows += sweep(variant + suffix, args.sizes, benchlib.DEFAULT_MODES,
                          memory_cap_mib=args.memory_cap_mib, case_timeout=args.case_timeout,
                          train_max_size=args.train_max_size, time_cap_s=args.time_cap_s,
                          **case_kwargs)
            benchlib.write_csv(rows, out / 'zoo_speed.csv')
    runs: list[Accuracy] = []
    if 'accuracy' in args.parts:
        runs = accuracy_runs(args, _demo_data(args, out), out)
    return rows, runs


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.train_worker:
        print(json.dumps(_train_worker(json.loads(args.train_worker))))
        return 0
    if args.matching:
        print(matching_table())
        return 0
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_from:
        rows, runs = earlier_runs(args.report_from, args.variants)
        benchlib.write_csv(rows, out / 'zoo_speed.csv')
        write_dataclass_csv(runs, out / 'zoo_accuracy.csv', Accuracy)
    else:
        rows, runs = measure(args, out)
    scales = [scaling(v, rows) for v in args.variants] if rows else []
    write_dataclass_csv(scales, out / 'zoo_scaling.csv', Scaling)
    acc = summarize_accuracy(runs)
    how = (f'{args.device}, {args.dtype}, batch 1, {rows[0].threads if rows else "-"} threads, '
           f'sizes {args.sizes} (training step up to {args.train_max_size or args.sizes[-1]}), '
           f'memory cap {args.memory_cap_mib:.0f} MiB, time cap {args.time_cap_s:.0f} s; '
           f'accuracy: seeds '
           f'{args.seeds}, UperNet {args.seg_iters} / Mask R-CNN {args.det_iters} iterations, '
           f'{args.jobs} at a time'
           + (' (quick mode: tiny widths)' if args.quick else ''))
    top = headlines(rows, scales, acc, args.ref_size, args.sizes[-1]) if rows else {}
    table = report(rows, scales, acc, runs, args.ref_size, top, how)
    (out / 'zoo.md').write_text(table + '\n')
    figures = plot(rows, acc, args.ref_size, out) if rows else []
    if args.docs is not None:
        update_page(args.docs, table, figures)
    print(table)
    print(f'\nwritten: {out}/zoo_speed.csv, zoo_scaling.csv, zoo_accuracy.csv, zoo.md, plots')
    # a variant that stops at a large size is a result; one that measured nothing is a failure
    unmeasured = [s.variant for s in scales if not s.sizes]
    return 1 if unmeasured or any(r.error for r in runs) else 0


if __name__ == '__main__':
    sys.exit(main())

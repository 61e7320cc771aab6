"""The attention zoo (docs/zoo.md): every token mixer in one macro
architecture (``configs/_base_/backbones/zoo_*.py``), measured the same way.

    python tools/analysis/zoo.py --docs docs/zoo.md            # the full run (2-core CPU)
    python tools/analysis/zoo.py --device cuda --dtype bf16    # CUDA, bf16 autocast
    python tools/analysis/zoo.py --quick --variants sra hilo   # tiny widths, a smoke run
    python tools/analysis/zoo.py --matching                    # the cost-matching table
    python tools/analysis/zoo.py --report-from work_dirs/zoo work_dirs/zoo2 --docs docs/zoo.md
    python tools/analysis/zoo.py --parts probes --docs docs/zoo.md   # the probe study (CPU)
    python tools/analysis/zoo.py --parts probes --scale gpu --device cuda --docs docs/zoo.md

Per variant, backbone + FPN neck (mmdet ``FPN``, 256 channels, 5 outputs),
batch 1:

* **cost**: parameters and GMACs at 224x224 and at each swept size
  (:func:`vattn_mm.analysis.count_complexity`);
* **speed**: forward and training-step latency, peak memory (also the
  largest peak of one token mixer's forward: the stride-4 ConvFFN sets the
  whole model's forward peak, the same in every variant) and fraction of
  the matmul peak at each size of ``--sizes`` (square, ascending; the
  training step up to ``--train-max-size``), measured by
  :mod:`vattn_mm.analysis.bench` (a timing and a memory process per variant); a variant
  stops at the first size whose peak memory or iteration time, extrapolated
  from the sizes before it, would pass ``--memory-cap-mib`` or
  ``--time-cap-s``, or whose run fails or passes ``--case-timeout``
  (recorded in the CSV's ``error`` column); the growth exponents of time and
  memory in the number of tokens are least-squares slopes in log-log;
* **accuracy**: each variant trained from scratch with the same schedule on
  the embedded demo data, UperNet (mIoU) and Mask R-CNN (box / mask AP),
  ``configs/zoo/<variant>_{upernet,maskrcnn}_demo.py``, once per seed (a
  fresh process each: train, then test).

* **probes** (``--parts probes``): the probe study of
  :mod:`vattn_mm.analysis.zoo.probe_study`: each design of ``--axes``
  (mixer: every variant; position: every encoding x tokeniser) trained
  from scratch on each of its probes once per ``--probe-seeds`` seed, one
  process per design (``--jobs`` at a time), stopped where its resident
  memory passes ``--probe-memory-mib`` or the study passes
  ``--time-budget-min``; written to ``zoo_probes.csv``, ``zoo_probes.md``,
  ``zoo_resolution.png``, ``zoo_capability.png`` (``--docs``: between the
  page's ``<!-- zoo:probes -->`` markers).

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
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional

from bench_workers import CaseWorkers

from vattn_mm.analysis.bench import DEFAULT_MODES, Row, write_csv
from vattn_mm.analysis.zoo import (TASKS, Accuracy, Scaling, earlier_runs, headlines,
                                   matching_table, plot, report, scaling, summarize_accuracy,
                                   sweep, train_and_test_here, update_page, variants,
                                   write_dataclass_csv)
from vattn_mm.analysis.zoo.probe_report import (PROBES_BEGIN, PROBES_END, plot_probes,
                                                probe_report)
from vattn_mm.analysis.zoo.probe_study import (AXES, POSITION_ENCODINGS, SCALES, TOKENISERS,
                                               ProbeRun, designs, merge_runs, probe_steps,
                                               read_probe_csv, run_probe)
from vattn_mm.analysis.zoo.probes import PROBES

ROOT = Path(__file__).resolve().parents[2]
FULL_SIZES = (256, 512, 1024, 2048)
FULL_TRAIN_MAX_SIZE = 1024
#: demo training iterations per run (60 runs: 15 variants x 2 tasks x 2 seeds)
FULL_TRAIN_ITERS = 60
QUICK_SIZES = (64, 96)
#: what a probe worker prints before each run's JSON
PROBE_TAG = 'PROBE_RUN '


def train_and_test(variant: str, task: str, seed: int, *, data_root: Path, iters: int,
                   quick: bool, work_dir: Path, timeout: Optional[float],
                   threads: Optional[int] = None) -> Accuracy:
    """:func:`vattn_mm.analysis.zoo.train_and_test_here` in a fresh process
    (a crash costs one run) with ``threads`` torch threads (None: torch's
    default)."""
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


def probe_worker(spec: dict) -> None:
    """Every (probe, seed) of one design in this process, one tagged JSON
    line each as it ends (a failed run is reported and the next one runs)."""
    import resource

    import torch

    import vattn_mm  # noqa: F401  (registers the layers)
    from vattn_mm.analysis.zoo.probe_study import Scale
    torch.set_num_threads(spec['threads'])
    scale = Scale(**spec['scale'])
    for probe, seed in spec['runs']:
        try:
            run = run_probe(spec['design'], probe, seed, scale, spec['device'])
        except Exception as e:  # noqa: BLE001  (recorded in the CSV; the next run goes on)
            run = ProbeRun(spec['design'], probe, seed, error=f'{type(e).__name__}: {e}')
        run.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(PROBE_TAG + json.dumps(run.__dict__), flush=True)


def _resident_mib(pid: int) -> float:
    """Another process's resident size (``VmRSS``; the package reads only
    its own process's, :mod:`vattn_mm.analysis.bench.memory`); 0 where
    ``/proc`` cannot tell."""
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.


def design_runs(design: str, runs: list, *, scale: str, device: str, threads: int,
                memory_mib: float, deadline: float) -> list[ProbeRun]:
    """:func:`probe_worker` of ``design`` in a fresh process, killed where
    its resident memory passes ``memory_mib`` or the clock passes
    ``deadline``; the runs it did not finish carry the reason."""
    from dataclasses import asdict
    spec = dict(design=design, runs=runs, scale=asdict(SCALES[scale]), device=device,
                threads=threads)
    cmd = [sys.executable, str(Path(__file__).resolve()), '--probe-worker', json.dumps(spec)]
    errors = tempfile.TemporaryFile('w+')     # a pipe could fill and stall the worker
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True,
                            cwd=ROOT, env={**os.environ, 'OMP_NUM_THREADS': str(threads)})
    stopped: list = []

    def watch() -> None:
        while proc.poll() is None:
            rss = _resident_mib(proc.pid)
            if rss > memory_mib:
                stopped.append(f'stopped: resident memory {rss:.0f} MiB passed the cap of '
                               f'{memory_mib:.0f} MiB')
            elif time.monotonic() > deadline:
                stopped.append('stopped: the study\'s time budget was spent')
            if stopped:
                proc.kill()
                return
            time.sleep(0.2)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    done = [ProbeRun(**json.loads(line[len(PROBE_TAG):]))
            for line in proc.stdout if line.startswith(PROBE_TAG)]
    proc.wait()
    watcher.join()
    errors.seek(0)
    stderr = errors.read()
    errors.close()
    if len(done) < len(runs):
        lines = stderr.strip().splitlines()
        why = stopped[0] if stopped else (f'exit {proc.returncode}: '
                                         f'{lines[-1] if lines else "no output"}')
        done += [ProbeRun(design, p, s, error=why) for p, s in runs[len(done):]]
    return done


def probe_runs(args: argparse.Namespace, out: Path) -> list[ProbeRun]:
    """The probe study: every design of ``args.axes``, ``args.jobs`` processes
    at a time; ``zoo_probes.csv`` rewritten as each design ends."""
    jobs = []
    for axis in args.axes:
        probes = [p for p in AXES[axis] if p in args.probes]
        for design in designs(axis, args.variants, args.positions, args.tokenisers):
            runs = [[p, s] for s in args.probe_seeds for p in probes]   # seed-major
            if runs:
                jobs.append((design, runs))
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    deadline = time.monotonic() + args.time_budget_min * 60
    done: dict = {}

    def run(job: tuple) -> list[ProbeRun]:
        print(f'[zoo] probes: {job[0]} ({len(job[1])} runs)', flush=True)
        return design_runs(*job, scale=args.scale, device=args.device, threads=threads,
                           memory_mib=args.probe_memory_mib, deadline=deadline)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run, job): job[0] for job in jobs}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            write_dataclass_csv([r for d, _ in jobs if d in done for r in done[d]],
                                out / 'zoo_probes.csv', ProbeRun)
    return [r for d, _ in jobs for r in done[d]]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Measure the attention zoo (docs/zoo.md)')
    parser.add_argument('--variants', nargs='+', help=f'default: all ({", ".join(variants())})')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: tiny widths, sizes 64 and 96, 2 training iterations on a '
                             'small demo set, 1 seed')
    parser.add_argument('--parts', nargs='+', choices=('speed', 'accuracy', 'probes'),
                        default=['speed', 'accuracy'],
                        help='probes: the probe study (not in the default parts)')
    parser.add_argument('--scale', choices=('cpu', 'gpu'), default='cpu',
                        help='probe study size: cpu (fits 90 min on 2 cores) or gpu (wider, '
                             'longer; --device cuda)')
    parser.add_argument('--axes', nargs='+', choices=tuple(AXES), default=list(AXES),
                        help='probe study axes: mixer (each variant) and position (encoding x '
                             'tokeniser with global attention)')
    parser.add_argument('--probes', nargs='+', choices=tuple(PROBES), default=list(PROBES),
                        help='probes to run (each axis runs its own)')
    parser.add_argument('--positions', nargs='+', choices=POSITION_ENCODINGS,
                        default=list(POSITION_ENCODINGS), help='position axis: encodings')
    parser.add_argument('--tokenisers', nargs='+', choices=tuple(TOKENISERS),
                        default=list(TOKENISERS), help='position axis: tokenisers')
    parser.add_argument('--probe-seeds', nargs='+', type=int,
                        help='probe seeds (default 0 1 2; quick: 0 1)')
    parser.add_argument('--probe-memory-mib', type=float, default=4096,
                        help='stop a probe process whose resident memory passes this')
    parser.add_argument('--time-budget-min', type=float, default=90,
                        help='wall-clock budget of the probe study; unfinished runs are '
                             'recorded as stopped')
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
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads of the speed cases (default: torch\'s) and of each '
                             'probe process (default: CPU cores / jobs; 1 where other work '
                             'shares the cores)')
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
    parser.add_argument('--probe-worker', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.train_worker or args.probe_worker or args.matching:
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
    args.probe_seeds = args.probe_seeds or ([0, 1] if args.quick else [0, 1, 2])
    if args.scale == 'gpu' and not args.device.startswith('cuda'):
        parser.error('--scale gpu is sized for a GPU: add --device cuda')
    if args.quick:
        args.scale = 'smoke'
    if args.time_budget_min <= 0 or args.probe_memory_mib <= 0:
        parser.error('--time-budget-min and --probe-memory-mib must be positive')
    args.jobs = args.jobs or min(2, os.cpu_count() or 1)
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        parser.error('--jobs and --threads must be >= 1')
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


def measure(args: argparse.Namespace, out: Path) -> tuple[list[Row], list[Accuracy]]:
    """The speed sweep and the accuracy runs that ``args`` asks for; the
    CSVs are written as they progress."""
    suffix = '@quick' if args.quick else ''
    rows: list[Row] = []
    if 'speed' in args.parts:
        case_kwargs = dict(device=args.device, dtype=args.dtype, warmup=args.warmup,
                           iters=args.iters, threads=args.threads)
        for variant in args.variants:
            print(f'[zoo] speed: {variant}', flush=True)
            with CaseWorkers() as workers:
                rows += sweep(workers, variant + suffix, args.sizes, DEFAULT_MODES,
                              memory_cap_mib=args.memory_cap_mib, case_timeout=args.case_timeout,
                              train_max_size=args.train_max_size, time_cap_s=args.time_cap_s,
                              errors=(RuntimeError, subprocess.TimeoutExpired), **case_kwargs)
            write_csv(rows, out / 'zoo_speed.csv')
    runs: list[Accuracy] = []
    if 'accuracy' in args.parts:
        runs = accuracy_runs(args, _demo_data(args, out), out)
    return rows, runs


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.train_worker:
        print(json.dumps(train_and_test_here(json.loads(args.train_worker))))
        return 0
    if args.probe_worker:
        probe_worker(json.loads(args.probe_worker))
        return 0
    if args.matching:
        print(matching_table())
        return 0
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    if set(args.parts) & {'speed', 'accuracy'}:
        status = speed_and_accuracy(args, out)
    if 'probes' in args.parts:
        status = max(status, probes_part(args, out))
    return status


def speed_and_accuracy(args: argparse.Namespace, out: Path) -> int:
    if args.report_from:
        rows, runs = earlier_runs(args.report_from, args.variants)
        write_csv(rows, out / 'zoo_speed.csv')
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


def probes_part(args: argparse.Namespace, out: Path) -> int:
    """The probe study (or, with ``--report-from``, the last earlier one) and its report."""
    start = time.monotonic()
    if args.report_from:
        found = [d / 'zoo_probes.csv' for d in args.report_from if (d / 'zoo_probes.csv').is_file()]
        if not found:
            raise FileNotFoundError(f'no zoo_probes.csv in {args.report_from}')
        runs = merge_runs(read_probe_csv(f) for f in found)
        write_dataclass_csv(runs, out / 'zoo_probes.csv', ProbeRun)
        took = ''
    else:
        runs = probe_runs(args, out)
        took = f', took {(time.monotonic() - start) / 60:.0f} min'
    scale = SCALES[args.scale]
    arch = scale.arch
    longer = ''.join(f' ({p.name}: {probe_steps(p, scale)})' for p in PROBES.values()
                     if p.schedule != 1 and p.name in args.probes)
    how = (f'{args.device}, fp32, {args.scale} scale: the first {len(arch["depths"])} stages '
           f'(widths {arch["embed_dims"]}, one block each) + a linear head, {scale.iters} AdamW '
           f'steps{longer} of batch {scale.batch} on fresh draws, mIoU on {scale.eval_images} '
           f'fixed evaluation images; seeds {args.probe_seeds}; {args.jobs} processes at a time on '
           f'{os.cpu_count()} cores{took}')
    text = probe_report(runs, how)
    (out / 'zoo_probes.md').write_text(text + '\n')
    figures = plot_probes(runs, out)
    if args.docs is not None:
        update_page(args.docs, text, figures, markers=(PROBES_BEGIN, PROBES_END))
    print(text)
    print(f'\nwritten: {out}/zoo_probes.csv, zoo_probes.md, figures')
    return 1 if any(r.error for r in runs) else 0


if __name__ == '__main__':
    sys.exit(main())

"""The attention zoo's measurements and reports, as ``projects/attention_zoo/tools/zoo.py``
asks for them (``args``: its parsed options; projects/attention_zoo/README.md).

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
  memory in the number of tokens are least-squares slopes in log-log
  (:mod:`.speed`);
* **accuracy**: each variant trained from scratch with the same schedule on
  the embedded demo data, UperNet (mIoU) and Mask R-CNN (box / mask AP),
  ``projects/attention_zoo/configs/<variant>_{upernet,maskrcnn}_demo.py``, once per seed (a
  fresh process each: train, then test; :mod:`.runs`).

* **probes** (``--parts probes``): the probe study of
  :mod:`.probe_study`: each design of ``--axes``
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
import os
import time
from pathlib import Path
from typing import Callable

from vattn_mm.analysis.bench import DEFAULT_MODES, Row, write_csv
from .accuracy import Accuracy, summarize_accuracy
from .probe_report import PROBES_BEGIN, PROBES_END, plot_probes, probe_report
from .probe_study import (CPU_LEFT_OUT, SCALES, ProbeRun, merge_runs, probe_steps,
                          read_probe_csv)
from .probes import PROBES
from .study_report import earlier_runs, headlines, plot, report, update_page, write_dataclass_csv
from .runs import accuracy_runs, probe_runs
from .speed import Scaling, Workers, scaling, sweep

FULL_SIZES = (256, 512, 1024, 2048)
FULL_TRAIN_MAX_SIZE = 1024
#: demo training iterations per run (60 runs: 15 variants x 2 tasks x 2 seeds)
FULL_TRAIN_ITERS = 60
QUICK_SIZES = (64, 96)


def run_study(args: argparse.Namespace, *, case_workers: Callable[[], Workers],
              train_and_test: Callable[..., Accuracy],
              design_runs: Callable[..., list[ProbeRun]]) -> int:
    """The parts ``args.parts`` asks for, into ``args.out_dir``; the exit
    status (1 where a run failed or a variant measured nothing).  The tool
    starts the processes: ``case_workers()`` gives the speed sweep's kept
    worker processes (a context manager), ``train_and_test`` and
    ``design_runs`` run an accuracy run and a probe design (:mod:`.runs`)."""
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    if set(args.parts) & {'speed', 'accuracy'}:
        status = speed_and_accuracy(args, out, case_workers, train_and_test)
    if 'probes' in args.parts:
        status = max(status, probes_part(args, out, design_runs))
    return status


def demo_data(args: argparse.Namespace, out: Path) -> Path:
    """The demo data of the accuracy runs, made where missing (quick: a
    smaller set under ``out``)."""
    root = Path(args.data_root)
    if args.quick:
        root = out / 'demo_data'
    if not (root / 'coco' / 'annotations' / 'instances_val.json').is_file():
        from vattn_mm.datasets import make_demo_dataset
        sizes = dict(num_train=8, num_val=4, size=128) if args.quick else {}
        make_demo_dataset(root, **sizes)
    return root.resolve()


def measure(args: argparse.Namespace, out: Path, case_workers: Callable[[], Workers],
            train_and_test: Callable[..., Accuracy]) -> tuple[list[Row], list[Accuracy]]:
    """The speed sweep and the accuracy runs that ``args`` asks for; the
    CSVs are written as they progress."""
    suffix = '@quick' if args.quick else ''
    rows: list[Row] = []
    if 'speed' in args.parts:
        case_kwargs = dict(device=args.device, dtype=args.dtype, warmup=args.warmup,
                           iters=args.iters, threads=args.threads)
        for variant in args.variants:
            print(f'[zoo] speed: {variant}', flush=True)
            with case_workers() as workers:
                rows += sweep(workers, variant + suffix, args.sizes, DEFAULT_MODES,
                              memory_cap_mib=args.memory_cap_mib, case_timeout=args.case_timeout,
                              train_max_size=args.train_max_size, time_cap_s=args.time_cap_s,
                              errors=workers.errors, **case_kwargs)
            write_csv(rows, out / 'zoo_speed.csv')
    runs: list[Accuracy] = []
    if 'accuracy' in args.parts:
        runs = accuracy_runs(args, demo_data(args, out), out, train_and_test)
    return rows, runs


def speed_and_accuracy(args: argparse.Namespace, out: Path,
                       case_workers: Callable[[], Workers],
                       train_and_test: Callable[..., Accuracy]) -> int:
    """The speed and accuracy parts (or, with ``--report-from``, earlier
    ones) and their report."""
    if args.report_from:
        rows, runs = earlier_runs(args.report_from, args.variants)
        write_csv(rows, out / 'zoo_speed.csv')
        write_dataclass_csv(runs, out / 'zoo_accuracy.csv', Accuracy)
    else:
        rows, runs = measure(args, out, case_workers, train_and_test)
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


def probes_part(args: argparse.Namespace, out: Path,
                design_runs: Callable[..., list[ProbeRun]]) -> int:
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
        runs = probe_runs(args, out, design_runs)
        took = f', took {(time.monotonic() - start) / 60:.0f} min'
    scale = SCALES[args.scale]
    arch = scale.arch
    left_out = [p for p in CPU_LEFT_OUT if args.scale == 'cpu' and not (
        args.named_probes and p in args.probes)]
    ran = {r.probe for r in runs}
    longer = ', '.join(f'{p.name}: {probe_steps(p, scale)}' for p in PROBES.values()
                       if p.schedule != 1 and p.name in ran)
    steps = f'{scale.iters} AdamW steps' + (f' ({longer})' if longer else '')
    plan = (f'; the variants re-run the designs of their base probe\'s claims; '
            f'{", ".join(left_out)} left to the gpu scale unless named' if left_out else '')
    how = (f'{args.device}, fp32, {args.scale} scale: the first {len(arch["depths"])} stages '
           f'(widths {arch["embed_dims"]}, one block each) + a linear head, {steps} '
           f'of batch {scale.batch} on fresh draws, mIoU on {scale.eval_images} '
           f'fixed evaluation images; seeds {args.probe_seeds}; {args.jobs} processes at a time on '
           f'{os.cpu_count()} cores{took}{plan}')
    text = probe_report(runs, how)
    (out / 'zoo_probes.md').write_text(text + '\n')
    figures = plot_probes(runs, out)
    if args.docs is not None:
        update_page(args.docs, text, figures, markers=(PROBES_BEGIN, PROBES_END))
    print(text)
    print(f'\nwritten: {out}/zoo_probes.csv, zoo_probes.md, figures')
    return 1 if any(r.error for r in runs) else 0

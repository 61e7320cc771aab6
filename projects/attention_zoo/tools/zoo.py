"""The attention zoo (projects/attention_zoo/README.md): every token mixer in one macro
architecture (``projects/attention_zoo/configs/_base_/backbones/zoo_*.py``), measured the same way.

    python projects/attention_zoo/tools/zoo.py --docs projects/attention_zoo/README.md            # the full run (2-core CPU)
    python projects/attention_zoo/tools/zoo.py --device cuda --dtype bf16    # CUDA, bf16 autocast
    python projects/attention_zoo/tools/zoo.py --quick --variants sra hilo   # tiny widths, a smoke run
    python projects/attention_zoo/tools/zoo.py --matching                    # the cost-matching table
    python projects/attention_zoo/tools/zoo.py --report-from work_dirs/zoo work_dirs/zoo2 --docs projects/attention_zoo/README.md
    python projects/attention_zoo/tools/zoo.py --parts probes --docs projects/attention_zoo/README.md   # the probe study (CPU)
    python projects/attention_zoo/tools/zoo.py --parts probes --scale gpu --device cuda --docs projects/attention_zoo/README.md

Per variant, backbone + FPN neck at batch 1: cost (parameters, GMACs), speed
(latency, peak memory, fraction of the matmul peak over growing input sizes,
until a memory or time cap) and accuracy (trained from scratch on the demo
data, UperNet and Mask R-CNN, once per seed); with ``--parts probes`` the
probe study.  What each part measures and writes to ``--out-dir``:
:mod:`attention_zoo.study`.  The speed cases run in the benchmark's
worker processes (``bench_workers.py``), each training run and probe design
in a process of its own (``zoo_workers.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import project_paths  # noqa: F401  (before the imports below)
import zoo_workers
from bench_workers import CaseWorkers

from vattn_mm.analysis.bench import device_problem
from attention_zoo import matching_table, variants
from attention_zoo.probe_study import (AXES, POSITION_ENCODINGS, TOKENISERS,
                                               WINDOW_DESIGNS)
from attention_zoo.probes import PROBES
from attention_zoo.study import (FULL_SIZES, FULL_TRAIN_ITERS, FULL_TRAIN_MAX_SIZE,
                                         QUICK_SIZES, run_study)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Measure the attention zoo (projects/attention_zoo/README.md)')
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
                        help='probe study axes: mixer (each variant), position (encoding x '
                             'tokeniser with global attention) and window (position terms in '
                             'windowed and pooling attention)')
    parser.add_argument('--probes', nargs='+', choices=tuple(PROBES),
                        help='probes to run (each axis runs its own and their variants, as '
                             'the scale plans; default: all the scale plans, named ones run '
                             'even where the CPU scale leaves them out)')
    parser.add_argument('--positions', nargs='+', choices=POSITION_ENCODINGS,
                        default=list(POSITION_ENCODINGS), help='position axis: encodings')
    parser.add_argument('--tokenisers', nargs='+', choices=tuple(TOKENISERS),
                        default=list(TOKENISERS), help='position axis: tokenisers')
    parser.add_argument('--windows', nargs='+', choices=WINDOW_DESIGNS,
                        default=list(WINDOW_DESIGNS),
                        help='window axis: attention + position term')
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
    args = parser.parse_args(argv)
    if args.matching:
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
    args.named_probes = args.probes is not None
    args.probes = args.probes or list(PROBES)
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
    problem = device_problem(args.device, args.dtype)
    if problem:
        parser.error(problem)
    if args.docs is not None and not args.docs.is_file():
        parser.error(f'--docs: no such page {args.docs}')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.matching:
        print(matching_table())
        return 0
    return run_study(args, case_workers=CaseWorkers, train_and_test=zoo_workers.train_and_test,
                     design_runs=zoo_workers.design_runs)


if __name__ == '__main__':
    sys.exit(main())

"""Inference / training-step latency, throughput, peak memory and fraction of
the machine's matmul peak of backbones or whole configs at several input sizes.

    python tools/analysis/benchmark.py PVTv2:b2 P2T:small --shapes 512x512 800x1344
    python tools/analysis/benchmark.py configs/pvtv2_b2_retinanet_coco.py --modes fwd
    python tools/analysis/benchmark.py PVTv2:b2 --modes train train_cp   # with_cp cost
    python tools/analysis/benchmark.py PVTv2:b2 --device cuda --dtype bf16
    python tools/analysis/benchmark.py PVTv2:b2 --runtime eager compile --dtype fp32 bf16
    python tools/analysis/benchmark.py PVTv2:b2 FocalNet:tiny_srf --graph-breaks
    python tools/analysis/benchmark.py Mixer:LiteMLA Mixer:AgentAttention \\
        --shapes 256x256 512x512 1024x1024 2048x2048   # one mixer stage; growth exponents
    python tools/analysis/benchmark.py --merge fwd.csv train.csv --name all   # combine runs
    python tools/analysis/benchmark.py PVTv2:b2 FocalNet:tiny_srf --against timm mmdet
    python tools/analysis/benchmark.py PVTv2:b2 --modes fwd --against onnxruntime inductor
    python tools/analysis/benchmark.py PVTv2:b2 --modes train --profile    # time per operator

Batch 1.  Each (model, size, mode) runs in fresh processes: one times it
(warm-up, then ``torch.utils.benchmark``'s ``blocked_autorange`` for about
``--iters`` iterations; median, interquartile range and timed iterations
reported; the matmul peak is ``torch.mm`` 2048x2048 GFLOP/s measured in the
same process), another (on
CUDA the same one) measures what the process pays: the memory it still holds
after the warm-up iterations above what it held once the model was built
(caches, buffers kept between steps; gradients freed) plus one steady
iteration's peak above its start, with the first iteration's peak beside it
(CPU: VmRSS and VmHWM after a ``/proc/self/clear_refs`` reset, glibc set to
unmap freed blocks; CUDA: ``memory_allocated`` / ``max_memory_allocated``).  Writes ``<out-dir>/<name>.csv``,
``.md`` and ``.png`` (throughput, memory and fraction of peak vs input size).
Several ``--runtime`` (eager, compile: ``torch.compile`` with inductor, compile
time reported apart) and ``--dtype`` values measure every case under each;
the report gives each one's speed against eager / fp32 and, for the forward,
the largest deviation of the outputs from eager fp32.  ``--graph-breaks``
measures nothing: it lists the ``torch.compile`` graph breaks of each target
(one forward at the first ``--shapes`` entry, per ``--modes`` fwd / train).
``--profile N`` runs one iteration of every (target, size, mode) under the
autograd profiler and writes the ``N`` operators with the most self time, a
training step's forward and backward apart, to ``<name>_profile.md``.
Details: :mod:`vattn_mm.analysis.bench`; worker processes:
``tools/analysis/bench_workers.py``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import bench_workers

from vattn_mm.analysis import target_graph_breaks
from vattn_mm.analysis.bench import (DEFAULT_MODES, DTYPES, MODES, RUNTIMES, Case, benchmark,
                                     device_problem, merge_rows, parse_shape, profile_case,
                                     read_csv, write_csv, write_report)
from vattn_mm.analysis.bench import peers


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Benchmark backbones or configs')
    parser.add_argument('targets', nargs='*',
                        help='configs and/or backbones as Family:arch (e.g. PVTv2:b2)')
    parser.add_argument('--merge', nargs='+', metavar='CSV',
                        help='measure nothing: combine the rows of earlier runs\' CSV files '
                             '(e.g. a forward-only and a training-only run) into one report')
    parser.add_argument('--shapes', nargs='+', default=['512x512', '800x1344'],
                        help='input sizes HxW (default 512x512 800x1344)')
    parser.add_argument('--modes', nargs='+', choices=MODES, default=list(DEFAULT_MODES),
                        help='fwd: inference; train: forward + backward; train_cp: the same with '
                             'with_cp=True (activation checkpointing; with train, the report '
                             'gives the time ratio and peak change). Default: fwd train')
    parser.add_argument('--device', default='cpu', help='cpu, cuda or cuda:N')
    parser.add_argument('--dtype', nargs='+', choices=DTYPES, default=['fp32'],
                        help='fp16 / bf16 run under autocast; several: each case in each, '
                             'with speed ratios to fp32')
    parser.add_argument('--runtime', nargs='+', choices=sorted(RUNTIMES), default=['eager'],
                        help='eager; compile: torch.compile (inductor), the compile time '
                             'reported apart; onnxruntime: exported to ONNX, run by '
                             'onnxruntime (fwd, fp32, CPU); several: each case under each, '
                             'with speed ratios to eager')
    parser.add_argument('--graph-breaks', action='store_true',
                        help='measure nothing: list the torch.compile graph breaks of each '
                             'target (exit 1 if any)')
    parser.add_argument('--profile', type=int, nargs='?', const=12, metavar='N',
                        help='measure nothing: the N (default 12) operators with the most self '
                             'CPU time per case, forward and backward apart (autograd profiler; '
                             'written to <name>_profile.md)')
    parser.add_argument('--warmup', type=int, default=2, help='untimed iterations first')
    parser.add_argument('--iters', type=int, default=5,
                        help='timing budget in iterations (blocked_autorange runs for about '
                             'this many; the count is reported)')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads (default: torch default, all cores)')
    parser.add_argument('--out-dir', default='work_dirs/benchmark', help='output folder')
    parser.add_argument('--name', default='benchmark', help='output file stem')
    parser.add_argument('--title', default='', help='plot title')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    parser.add_argument('--no-memory', action='store_true',
                        help='time only: no peak-memory processes (half the start-ups)')
    parser.add_argument('--against', nargs='+', metavar='LIBRARY',
                        help='also run these libraries\' versions of the targets with the same '
                             'weights (timm, mmdet), or our model exported to onnxruntime '
                             '(forward) or compiled by inductor '
                             '(vattn_mm.analysis.bench.peers), alternating with ours in one '
                             'process, and report the ratios (written to <name>_against.md; '
                             '--no-memory: times only)')
    args = parser.parse_args(argv)
    args.dtype = list(dict.fromkeys(args.dtype))
    args.runtime = list(dict.fromkeys(args.runtime))
    if bool(args.targets) == bool(args.merge):
        parser.error('give the models to measure, or --merge CSV files (not both)')
    if args.against and (len(args.dtype) > 1 or args.runtime != ['eager']):
        parser.error('--against compares eager runs in one --dtype')
    if (args.graph_breaks or args.profile) and args.merge:
        parser.error('--graph-breaks / --profile look at targets, not at --merge files')
    if args.profile is not None and args.profile < 1:
        parser.error('--profile N needs N >= 1')
    missing = [p for p in args.merge or [] if not Path(p).is_file()]
    if missing:
        parser.error(f'--merge: no such file(s): {missing}')
    target_csv = (Path(args.out_dir) / f'{args.name}.csv').resolve()
    if any(Path(p).resolve() == target_csv for p in args.merge or []):
        parser.error(f'--merge would overwrite its input {target_csv}; choose another --name')
    try:
        args.shapes = [parse_shape(s) for s in args.shapes]
    except ValueError as err:
        parser.error(str(err))
    if args.warmup < 0 or args.iters < 1:
        parser.error('--warmup must be >= 0 and --iters >= 1')
    problem = device_problem(args.device)
    if problem:
        parser.error(problem)
    return args


def graph_breaks(args: argparse.Namespace) -> int:
    """Print each target's graph breaks per mode (fwd: eval, else train);
    1 if there is any."""
    found = 0
    for spec in args.targets:
        for mode, report in target_graph_breaks(spec, args.shapes[0], args.modes,
                                                args.device).items():
            found += len(report.breaks)
            print(f'{spec} {mode}: {report.format()}')
    return 1 if found else 0


def profiles(args: argparse.Namespace, out: Path) -> int:
    """Write and print the operator profile of every case."""
    sections = [profile_case(Case(spec, shape, mode, device=args.device, dtype=dtype,
                                  runtime=runtime, warmup=args.warmup, threads=args.threads),
                             args.profile)
                for spec in args.targets for shape in args.shapes for mode in args.modes
                for dtype in args.dtype for runtime in args.runtime]
    text = '\n\n'.join(sections)
    (out / f'{args.name}_profile.md').write_text(text + '\n')
    print(text)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.graph_breaks:
        return graph_breaks(args)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.profile:
        return profiles(args, out)
    csv_path = out / f'{args.name}.csv'
    if args.merge:
        rows = merge_rows(row for path in args.merge for row in read_csv(Path(path)))
        write_csv(rows, csv_path)
    else:
        done = []

        def save(row) -> None:            # after every (model, size): nothing is lost
            done.append(row)
            write_csv(done, csv_path)
        def run_case(case: Case):
            return bench_workers.run_case(case, memory=not args.no_memory)
        rows = benchmark(args.targets, args.shapes, run_case, args.modes,
                         progress=not args.no_progress, on_row=save, device=args.device,
                         dtypes=args.dtype, runtimes=args.runtime, warmup=args.warmup,
                         iters=args.iters, threads=args.threads,
                         errors=bench_workers.CASE_ERRORS)
    against = ''
    if args.against:
        against = peers.markdown(peers.against(
            args.targets, args.shapes, args.modes, args.against, bench_workers.run_compare,
            None if args.no_memory else bench_workers.peak_mib, device=args.device, dtype=args.dtype[0], warmup=args.warmup,
            iters=args.iters, threads=args.threads))
        (out / f'{args.name}_against.md').write_text(against + '\n')
    print(write_report(rows, out, args.name, args.title, against))
    print(f'\nwritten: {out / args.name}.csv, .md, .png')
    return 1 if any(r.error for r in rows) else 0


if __name__ == '__main__':
    sys.exit(main())

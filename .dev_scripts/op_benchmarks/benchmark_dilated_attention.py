"""Time and peak memory of DilateFormer's first stage: our per-offset
multi-scale dilated attention vs the official ``nn.Unfold`` formulation.

Every measurement runs in a fresh worker process (this script with
``--worker``) so that peaks do not mix; the largest difference between the
two outputs is measured at the same size.  Scopes: ``msda`` (the attention
layer of the first block), ``stage`` (all blocks of the first stage); modes:
``inference`` and ``train`` (forward and backward).  What is measured and
how: :mod:`dilated_vs_unfold.py`.  Prints one markdown
table::

    # DilateFormer-S, 800x1344, CPU (and CUDA when available)
    python .dev_scripts/op_benchmarks/benchmark_dilated_attention.py
    python .dev_scripts/op_benchmarks/benchmark_dilated_attention.py --device cpu --size 512 512
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from bench_workers import exec_with_mmap_malloc, worker_reply

import dilated_vs_unfold


def run_worker(spec: dict) -> dict:
    """:func:`dilated_vs_unfold.py.worker` in a fresh
    process of this script."""
    return worker_reply([sys.executable, __file__, '--worker', json.dumps(spec)], str(spec))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--arch', default='small', choices=('tiny', 'small', 'base'))
    parser.add_argument('--size', type=int, nargs=2, default=(800, 1344), metavar=('H', 'W'),
                        help='image size; the first stage runs at ceil(size / 4)')
    parser.add_argument('--device', choices=('cpu', 'cuda'), action='append',
                        help='default: cpu, and cuda when available')
    parser.add_argument('--scope', choices=dilated_vs_unfold.SCOPES, action='append')
    parser.add_argument('--mode', choices=dilated_vs_unfold.MODES, action='append')
    parser.add_argument('--repeat', type=int, default=3,
                        help='timing budget in runs (blocked_autorange; median reported)')
    parser.add_argument('--threads', type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        if spec['task'] == 'memory' and spec['device'] == 'cpu':
            exec_with_mmap_malloc()
        print(json.dumps(dilated_vs_unfold.worker(spec)))
        return
    dilated_vs_unfold.run(run_worker, arch=args.arch, size=args.size,
                          devices=args.device, scopes=args.scope or dilated_vs_unfold.SCOPES,
                          modes=args.mode or dilated_vs_unfold.MODES, repeat=args.repeat,
                          threads=args.threads)


if __name__ == '__main__':
    main()

"""Time and peak memory of QuadTree attention vs dense attention.

One QuadTree-B attention layer at stage-1 width and a dense full-attention
layer of the same width on the stride-4 tokens of 512x512, 800x1344,
1024x1024 and 2048x2048 images, and the QuadTree-B-b2 backbone on the images
up to 1024x1024; each case in fresh worker processes (this script with
``--worker``).  Prints a markdown table and the growth ratios for 4x the
tokens.  What is measured and how: :mod:`quadtree_vs_dense.py`.

    python .dev_scripts/op_benchmarks/benchmark_quadtree.py [--device cpu|cuda] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import sys

from bench_workers import WorkerError, exec_with_mmap_malloc, worker_reply

import quadtree_vs_dense


def measure_case(spec: dict, env: dict) -> dict:
    """Time (in ``env``) and peak memory of one case, each in a fresh process
    of this script; a failed one skips the case."""
    out = {}
    for part in ('time', 'memory'):
        cmd = [sys.executable, __file__, '--worker', json.dumps(dict(spec, part=part))]
        try:
            out.update(worker_reply(cmd, f'{spec["kind"]} {part}', env=env))
        except WorkerError as err:
            return quadtree_vs_dense.skipped(err.lines[-1] if err.lines else 'killed', err.code)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--repeat', type=int, default=1,
                        help='timing budget in runs after one warm-up (blocked_autorange)')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads (default: 1 on CPU, for stable times)')
    parser.add_argument('--train', action='store_true', help='time forward + backward')
    parser.add_argument('--dense-max-tokens', type=int, default=None,
                        help='skip dense attention above this many tokens '
                             '(default 20000 on CPU, 300000 on CUDA)')
    parser.add_argument('--no-backbone', action='store_true', help='attention layers only')
    parser.add_argument('--system-malloc', action='store_true',
                        help="keep glibc's default mmap / trim thresholds on CPU")
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        if spec['part'] == 'memory' and spec['device'] == 'cpu':
            exec_with_mmap_malloc()
        print(json.dumps(quadtree_vs_dense.worker(spec)))
        return
    env = quadtree_vs_dense.worker_env(args.device, args.system_malloc)
    quadtree_vs_dense.run(lambda spec: measure_case(spec, env), device=args.device,
                          repeat=args.repeat, threads=args.threads, train=args.train,
                          dense_max_tokens=args.dense_max_tokens,
                          backbone=not args.no_backbone, system_malloc=args.system_malloc)


if __name__ == '__main__':
    main()

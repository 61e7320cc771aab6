"""Time and peak memory of QuadTree attention vs dense attention.

Measures, at image sizes 512x512, 800x1344, 1024x1024 (and 2048x2048 for the
single layer):

* one QuadTree-B attention layer at stage-1 width (64 channels, 1 head,
  4 levels, top-k 32 per level: the official dense b1-b4 stage-1 settings)
  on the stride-4 map of the image;
* a dense full-attention layer of the same width (q / kv / proj linears +
  ``F.scaled_dot_product_attention``) on the same tokens - cases whose
  ``N x N`` scores exceed ``--dense-max-tokens`` are marked skipped;
* the whole QuadTree-B-b2 backbone on the image.

Forward passes in eval mode without autograd (``--train``: forward + backward).
Each case runs in a fresh subprocess.  Time: after one warm-up,
``torch.utils.benchmark``'s ``blocked_autorange`` for about ``--repeat``
runs (:func:`vattn_mm.analysis.bench.time_steps`; median, interquartile
range and timed runs reported), single thread on CPU by default.  Peak memory
is what one run adds to the imports, the model, the input and a warm-up run,
measured in a second subprocess (:class:`vattn_mm.analysis.bench.PeakMemory`:
``torch.cuda.max_memory_allocated`` on CUDA, the process's high-water mark on
CPU, where the memory worker runs with glibc unmapping freed blocks at once; it
includes every transient buffer).  Prints a
markdown table and the growth ratios for 4x the tokens (linear cost: about 4x;
the check is <= 5x).

CPU workers run with glibc's ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``
raised (``--system-malloc`` keeps the defaults): by default every temporary
over 32 MiB is mmap-ed and unmapped again, so each call page-faults all of its
large buffers in anew, a kernel cost that grows faster than the tokens; a
caching allocator (this setting, jemalloc, tcmalloc, the CUDA allocator)
reuses them, as PyTorch's CPU performance guide recommends.

    python tools/analysis/benchmark_quadtree.py [--device cpu|cuda] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SIZES = [(512, 512), (800, 1344), (1024, 1024), (2048, 2048)]
BACKBONE_SIZES = SIZES[:3]
WIDTH, HEADS, LEVELS, TOPKS = 64, 1, 4, [32, 32, 32, 32]
#: 4x-token pairs whose growth is checked
PAIRS = [((512, 512), (1024, 1024)), ((1024, 1024), (2048, 2048))]


def _build(kind: str):
    import torch
    from torch import nn
    import torch.nn.functional as F

    from vattn_mm.backbones import QuadTree
    from vattn_mm.layers import QuadtreeAttention

    class DenseAttention(nn.Module):
        """Full multi-head self-attention of the same width."""

        def __init__(self, dims: int, heads: int):
            super().__init__()
            self.heads = heads
            self.q, self.kv, self.proj = nn.Linear(dims, dims), nn.Linear(dims, 2 * dims), \
                nn.Linear(dims, dims)

        def forward(self, x, hw):
            b, n, c = x.shape
            q = self.q(x).view(b, n, self.heads, -1).transpose(1, 2)
            k, v = self.kv(x).view(b, n, 2 * self.heads, -1).transpose(1, 2).chunk(2, dim=1)
            out = F.scaled_dot_product_attention(q, k, v)
            return self.proj(out.transpose(1, 2).reshape(b, n, c))

    if kind == 'quadtree':
        return QuadtreeAttention(WIDTH, HEADS, LEVELS, topks=TOPKS, attn_type='B')
    if kind == 'dense':
        return DenseAttention(WIDTH, HEADS)
    return QuadTree('b2', drop_path_rate=0.)


def worker(spec: dict) -> dict:
    """Run one case in this (fresh) process and return its time
    (``spec['part'] == 'time'``) or its peak memory (``'memory'``)."""
    from bench_workers import exec_with_mmap_malloc

    from vattn_mm.analysis.bench import PeakMemory, time_steps
    if spec['part'] == 'memory' and spec['device'] == 'cpu':
        exec_with_mmap_malloc()
    import torch
    torch.set_num_threads(spec['threads'])
    device = torch.device(spec['device'])
    kind, (h, w) = spec['kind'], spec['size']
    model = _build(kind).to(device)
    model.train(spec['train'])
    if kind == 'backbone':
        x = torch.randn(1, 3, h, w, device=device)
        run_args = (x, )
    else:
        hw = (h // 4, w // 4)
        x = torch.randn(1, hw[0] * hw[1], WIDTH, device=device)
        run_args = (x, hw)
    x.requires_grad_(spec['train'])

    def run():
        with torch.set_grad_enabled(spec['train']):
            out = model(*run_args)
            if spec['train']:
                sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out, ))).backward()
        if device.type == 'cuda':
            torch.cuda.synchronize()

    run()  # warm-up
    if spec['part'] == 'memory':
        model.zero_grad(set_to_none=True)  # the run's gradients count in its peak
        with PeakMemory(spec['device']) as peak:
            run()
        return dict(peak_bytes=peak.bytes)
    timing = time_steps({kind: run}, spec['repeat'])[kind]
    return dict(time_s=timing.median_s, iqr_s=timing.iqr_s, runs=timing.runs)


#: glibc settings that keep freed large blocks for reuse (see the docstring)
CACHING_MALLOC = dict(MALLOC_MMAP_THRESHOLD_=str(2**34), MALLOC_TRIM_THRESHOLD_=str(2**34))


def measure(spec: dict, env: dict) -> dict:
    """Time (in ``env``) and peak memory of one case, each in a fresh process."""
    out = {}
    for part in ('time', 'memory'):
        cmd = [sys.executable, __file__, '--worker', json.dumps(dict(spec, part=part))]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            err = (proc.stderr.strip().splitlines() or ['killed'])[-1]
            reason = 'OOM' if 'out of memory' in err.lower() or proc.returncode < 0 else err
            return dict(skipped=f'failed: {reason[:80]}')
        out.update(json.loads(lines[-1]))
    return out


def fmt(res: dict | None) -> tuple[str, str]:
    """(time cell: median, IQR and timed runs; peak cell)."""
    if res is None:
        return '-', '-'
    if 'skipped' in res:
        return res['skipped'], '-'
    return (f"{res['time_s'] * 1e3:,.0f} ms (IQR {res['iqr_s'] * 1e3:,.1f}, {res['runs']} runs)",
            f"{res['peak_bytes'] / 2**20:,.0f} MiB")


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
        print(json.dumps(worker(json.loads(args.worker))))
        return
    args.threads = args.threads or (1 if args.device == 'cpu' else os.cpu_count())
    dense_max = args.dense_max_tokens or (20000 if args.device == 'cpu' else 300000)
    base = dict(device=args.device, repeat=args.repeat, threads=args.threads, train=args.train)
    caching = args.device == 'cpu' and not args.system_malloc
    env = dict(os.environ, **(CACHING_MALLOC if caching else {}))
    results = {}
    for kind, sizes in (('quadtree', SIZES), ('dense', SIZES),
                        ('backbone', [] if args.no_backbone else BACKBONE_SIZES)):
        for size in sizes:
            tokens = size[0] * size[1] // 16
            if kind == 'dense' and tokens > dense_max:
                n2 = float(tokens) ** 2
                res = dict(skipped=f'skipped: {n2:.1e} scores ({n2 * 4 / 2**30:,.0f} GiB '
                                   'as an fp32 map)')
            else:
                res = measure(dict(base, kind=kind, size=size), env)
            results[kind, size] = res
            print(f'{kind} {size[0]}x{size[1]}: {res}', file=sys.stderr, flush=True)

    mode = 'forward + backward' if args.train else 'forward, no grad'
    print(f'\nDevice {args.device}, {args.threads} thread(s), {mode}; time = median of '
          f'torch.utils.benchmark blocked_autorange (budget {args.repeat} runs) after a '
          'warm-up; peak = extra memory during the runs'
          + ('; glibc caching malloc settings' if caching else '') + '.\n')
    print('| model | image | stage-1 tokens | QuadTree-B time | QuadTree-B peak | '
          'dense attention time | dense peak |')
    print('|---|---|---|---|---|---|---|')
    for size in SIZES:
        q, d = fmt(results.get(('quadtree', size))), fmt(results.get(('dense', size)))
        print(f'| attention layer (C={WIDTH}, {LEVELS} levels, top-k {TOPKS[0]}) | '
              f'{size[0]}x{size[1]} | {size[0] * size[1] // 16:,} | {q[0]} | {q[1]} | '
              f'{d[0]} | {d[1]} |')
    for size in BACKBONE_SIZES if not args.no_backbone else []:
        q = fmt(results.get(('backbone', size)))
        print(f'| QuadTree-B-b2 backbone | {size[0]}x{size[1]} | {size[0] * size[1] // 16:,} | '
              f'{q[0]} | {q[1]} | - | - |')

    print('\n| model | tokens | time ratio | memory ratio | <= 5x |')
    print('|---|---|---|---|---|')
    ok = True
    for kind in ('quadtree', 'dense', 'backbone'):
        for small, large in PAIRS:
            a, b = results.get((kind, small)), results.get((kind, large))
            if not a or not b or 'skipped' in a or 'skipped' in b:
                continue
            t = b['time_s'] / a['time_s']
            m = b['peak_bytes'] / max(a['peak_bytes'], 1)
            linear = t <= 5 and m <= 5
            ok &= linear or kind == 'dense'
            print(f'| {kind} | {small[0]}x{small[1]} -> {large[0]}x{large[1]} (4x) | '
                  f'{t:.2f}x | {m:.2f}x | {"yes" if linear else "NO"} |')
    print(f'\nQuadTree cost linear in the tokens (4x tokens <= 5x time and memory): '
          f'{"yes" if ok else "NO"}')


if __name__ == '__main__':
    main()

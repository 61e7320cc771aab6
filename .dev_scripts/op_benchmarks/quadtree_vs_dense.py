"""Time and peak memory of QuadTree attention vs dense attention, the
library of ``.dev_scripts/op_benchmarks/benchmark_quadtree.py``.

Measures, at image sizes 512x512, 800x1344, 1024x1024 (and 2048x2048 for the
single layer):

* one QuadTree-B attention layer at stage-1 width (64 channels, 1 head,
  4 levels, top-k 32 per level: the official dense b1-b4 stage-1 settings)
  on the stride-4 map of the image;
* a dense full-attention layer of the same width (q / kv / proj linears +
  ``F.scaled_dot_product_attention``) on the same tokens - cases whose
  ``N x N`` scores exceed ``dense_max_tokens`` are marked skipped;
* the whole QuadTree-B-b2 backbone on the image.

Forward passes in eval mode without autograd (``train``: forward + backward).
Each case runs in fresh worker processes that the tool starts, one timing it
and one measuring its memory (:func:`worker`).  Time: after one
warm-up, ``torch.utils.benchmark``'s ``blocked_autorange`` for about
``repeat`` runs (:func:`.timing.time_steps`; median, interquartile range and
timed runs reported), single thread on CPU by default.  Peak memory is what
one run adds to the imports, the model, the input and a warm-up run, measured
in the second process (:class:`.memory.PeakMemory`: ``torch.cuda.max_memory_allocated``
on CUDA, the process's high-water mark on CPU, where the memory worker runs
with glibc unmapping freed blocks at once; it includes every transient
buffer).  Prints a markdown table and the growth ratios for 4x the tokens
(linear cost: about 4x; the check is <= 5x).

CPU timing workers run with glibc's ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` raised (:func:`worker_env`; ``system_malloc`` keeps
the defaults): by default every temporary over 32 MiB is mmap-ed and
unmapped again, so each call page-faults all of its large buffers in anew, a
kernel cost that grows faster than the tokens; a caching allocator (this
setting, jemalloc, tcmalloc, the CUDA allocator) reuses them, as PyTorch's CPU
performance guide recommends.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from vattn_mm.analysis.bench import markdown_row, step_peak_bytes, time_steps

SIZES = [(512, 512), (800, 1344), (1024, 1024), (2048, 2048)]
BACKBONE_SIZES = SIZES[:3]
WIDTH, HEADS, LEVELS, TOPKS = 64, 1, 4, [32, 32, 32, 32]
#: 4x-token pairs whose growth is checked
PAIRS = [((512, 512), (1024, 1024)), ((1024, 1024), (2048, 2048))]
#: glibc settings that keep freed large blocks for reuse (see the module's docstring)
CACHING_MALLOC = dict(MALLOC_MMAP_THRESHOLD_=str(2**34), MALLOC_TRIM_THRESHOLD_=str(2**34))
KINDS = ('quadtree', 'dense', 'backbone')


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


def build(kind: str) -> nn.Module:
    """The model of ``kind`` (one of :data:`KINDS`)."""
    from vattn_mm.backbones import QuadTree
    from vattn_mm.layers import QuadtreeAttention
    if kind == 'quadtree':
        return QuadtreeAttention(WIDTH, HEADS, LEVELS, topks=TOPKS, attn_type='B')
    if kind == 'dense':
        return DenseAttention(WIDTH, HEADS)
    return QuadTree('b2', drop_path_rate=0.)


def caching_malloc(device: str, system_malloc: bool = False) -> bool:
    """Whether the timing workers run with :data:`CACHING_MALLOC`."""
    return device == 'cpu' and not system_malloc


def worker_env(device: str, system_malloc: bool = False) -> dict:
    """The environment of the timing workers."""
    return dict(os.environ, **(CACHING_MALLOC if caching_malloc(device, system_malloc) else {}))


def worker(spec: dict) -> dict:
    """Run one case in this (fresh) process and return its time
    (``spec['part'] == 'time'``) or its peak memory (``'memory'``; on CPU
    the process must have been started for :class:`.memory.PeakMemory`)."""
    torch.set_num_threads(spec['threads'])
    device = torch.device(spec['device'])
    kind, (h, w) = spec['kind'], spec['size']
    model = build(kind).to(device)
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
        return dict(peak_bytes=step_peak_bytes(run, spec['device'], model))
    timing = time_steps({kind: run}, spec['repeat'])[kind]
    return dict(time_s=timing.median_s, iqr_s=timing.iqr_s, runs=timing.runs)


def skipped(last_error_line: str, exit_code: int) -> dict:
    """The result of a case whose worker failed: out of memory (the error
    says so, or a signal killed it) or the error itself."""
    reason = last_error_line
    if 'out of memory' in reason.lower() or exit_code < 0:
        reason = 'OOM'
    return dict(skipped=f'failed: {reason[:80]}')


def cells(res: Optional[dict]) -> tuple[str, str]:
    """(time cell: median, IQR and timed runs; peak cell)."""
    if res is None:
        return '-', '-'
    if 'skipped' in res:
        return res['skipped'], '-'
    return (f"{res['time_s'] * 1e3:,.0f} ms (IQR {res['iqr_s'] * 1e3:,.1f}, {res['runs']} runs)",
            f"{res['peak_bytes'] / 2**20:,.0f} MiB")


def run(measure_case: Callable[[dict], dict], *, device: str = 'cpu', repeat: int = 1,
        threads: Optional[int] = None, train: bool = False,
        dense_max_tokens: Optional[int] = None, backbone: bool = True,
        system_malloc: bool = False) -> None:
    """Measure every case by ``measure_case(spec)`` (the tool's worker
    processes: :func:`worker` for each ``part`` of the spec, ``time`` and
    ``memory``, merged; :func:`skipped` where one fails), progress on stderr,
    and print the tables; ``threads`` defaults to 1 on CPU,
    ``dense_max_tokens`` to 20000 on CPU and 300000 on CUDA."""
    threads = threads or (1 if device == 'cpu' else os.cpu_count())
    dense_max = dense_max_tokens or (20000 if device == 'cpu' else 300000)
    base = dict(device=device, repeat=repeat, threads=threads, train=train)
    results = {}
    for kind, sizes in zip(KINDS, (SIZES, SIZES, BACKBONE_SIZES if backbone else [])):
        for size in sizes:
            tokens = size[0] * size[1] // 16
            if kind == 'dense' and tokens > dense_max:
                n2 = float(tokens) ** 2
                res = dict(skipped=f'skipped: {n2:.1e} scores ({n2 * 4 / 2**30:,.0f} GiB '
                                   'as an fp32 map)')
            else:
                res = measure_case(dict(base, kind=kind, size=size))
            results[kind, size] = res
            print(f'{kind} {size[0]}x{size[1]}: {res}', file=sys.stderr, flush=True)
    mode = 'forward + backward' if train else 'forward, no grad'
    print(f'\nDevice {device}, {threads} thread(s), {mode}; time = median of '
          f'torch.utils.benchmark blocked_autorange (budget {repeat} runs) after a '
          'warm-up; peak = extra memory during the runs'
          + ('; glibc caching malloc settings' if caching_malloc(device, system_malloc) else '')
          + '.\n')
    print_tables(results, backbone)


def print_tables(results: dict, backbone: bool) -> None:
    """The time / peak table of every case and the growth table of :data:`PAIRS`."""
    print(markdown_row(('model', 'image', 'stage-1 tokens', 'QuadTree-B time', 'QuadTree-B peak',
                        'dense attention time', 'dense peak')))
    print('|---|---|---|---|---|---|---|')
    for size in SIZES:
        q, d = cells(results.get(('quadtree', size))), cells(results.get(('dense', size)))
        print(markdown_row((f'attention layer (C={WIDTH}, {LEVELS} levels, top-k {TOPKS[0]})',
                            f'{size[0]}x{size[1]}', f'{size[0] * size[1] // 16:,}', *q, *d)))
    for size in BACKBONE_SIZES if backbone else []:
        q = cells(results.get(('backbone', size)))
        print(markdown_row(('QuadTree-B-b2 backbone', f'{size[0]}x{size[1]}',
                            f'{size[0] * size[1] // 16:,}', *q, '-', '-')))

    print('\n| model | tokens | time ratio | memory ratio | <= 5x |')
    print('|---|---|---|---|---|')
    ok = True
    for kind in KINDS:
        for small, large in PAIRS:
            a, b = results.get((kind, small)), results.get((kind, large))
            if not a or not b or 'skipped' in a or 'skipped' in b:
                continue
            t = b['time_s'] / a['time_s']
            m = b['peak_bytes'] / max(a['peak_bytes'], 1)
            linear = t <= 5 and m <= 5
            ok &= linear or kind == 'dense'
            print(markdown_row((kind, f'{small[0]}x{small[1]} -> {large[0]}x{large[1]} (4x)',
                                f'{t:.2f}x', f'{m:.2f}x', 'yes' if linear else 'NO')))
    print(f'\nQuadTree cost linear in the tokens (4x tokens <= 5x time and memory): '
          f'{"yes" if ok else "NO"}')

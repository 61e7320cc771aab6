"""Time and peak memory of DilateFormer's first stage: our per-offset
multi-scale dilated attention vs the official ``nn.Unfold`` formulation.

Every measurement runs in a fresh subprocess so that peaks do not mix:

* time: after a warm-up on a tiny input, ``torch.utils.benchmark``'s
  ``blocked_autorange`` for about ``--repeat`` runs, each on a fresh copy of
  the input (:func:`vattn_mm.analysis.bench.time_steps`; median,
  interquartile range and timed runs reported);
* in another subprocess, the memory one run adds to what the imports, the
  model, the input and the warm-up hold
  (:class:`vattn_mm.analysis.bench.PeakMemory`: on CPU the process's
  high-water mark, the process started with glibc serving big blocks with
  ``mmap`` so that freed memory leaves the resident set at once;
  ``torch.cuda.max_memory_allocated()`` on CUDA).

Scopes: ``msda`` = the attention layer of the first block (input: normalised
tokens), ``stage`` = all blocks of the first stage (positional convs, MSDA,
MLPs).  Modes: ``inference`` (``torch.no_grad``) and ``train`` (forward and
backward).  The largest difference between the two outputs is measured at the
same size (in another subprocess).  Prints one markdown table::

    # DilateFormer-S, 800x1344, CPU (and CUDA when available)
    python tools/analysis/benchmark_dilated_attention.py
    python tools/analysis/benchmark_dilated_attention.py --device cpu --size 512 512
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

IMPLS = ('unfold', 'ours')


def unfold_forward(module, x, hw):
    """Official ``MultiDilatelocalAttention`` computation (k*k ``nn.Unfold``
    copies of keys and values) with ``module``'s weights; one group at a time
    in a function call, writing the group-major output like the official code."""
    import torch
    from torch import nn

    b, n, c = x.shape
    h, w = hw
    groups = len(module.dilation)
    ks, hd = module.kernel_size, module.head_dims
    heads = c // groups // hd

    def group(q, k, v, dilation):
        unfold = nn.Unfold(ks, dilation, dilation * (ks - 1) // 2, 1)
        q = q.reshape(b, heads, hd, 1, n).permute(0, 1, 4, 3, 2)
        k = unfold(k).reshape(b, heads, hd, ks * ks, n).permute(0, 1, 4, 2, 3)
        attn = ((q @ k) * module.scale).softmax(dim=-1)
        v = unfold(v).reshape(b, heads, hd, ks * ks, n).permute(0, 1, 4, 3, 2)
        return (attn @ v).transpose(1, 2).reshape(b, h, w, c // groups)

    qkv = module.qkv(x.transpose(1, 2).reshape(b, c, h, w))
    qkv = qkv.reshape(b, 3, groups, c // groups, h, w).permute(2, 1, 0, 3, 4, 5)
    out = x.new_empty(b, h, w, c)
    for g, dilation in enumerate(module.dilation):
        out[..., g * c // groups:(g + 1) * c // groups] = group(*qkv[g], dilation)
    return module.proj(out.reshape(b, n, c))


def build(args, impl: str, device: str):
    """First stage of the model and a function running the chosen scope."""
    import torch
    from vattn_mm.backbones import DilateFormer
    from vattn_mm.layers import MultiScaleDilatedAttention

    torch.manual_seed(0)
    model = DilateFormer(args.arch, drop_path_rate=0.)
    model.init_weights()
    stage = model.stages[0].to(device)
    if impl == 'unfold':
        for m in stage.modules():
            if isinstance(m, MultiScaleDilatedAttention):
                m.forward = (lambda mod: lambda x, hw: unfold_forward(mod, x, hw))(m)
    if args.scope == 'msda':
        block = stage.blocks[0]
        return stage, lambda x, hw: block.attn(x, hw)
    return stage, lambda x, hw: model.run_stage(stage, x, hw)


def tokens(args, size, device):
    import torch
    from vattn_mm.backbones import DilateFormer
    h, w = ((s + 3) // 4 for s in size)
    c = DilateFormer.arch_zoo[args.arch]['embed_dim']
    gen = torch.Generator().manual_seed(1)
    return torch.randn(1, h * w, c, generator=gen).to(device), (h, w)


def run_once(args, fn, x, hw):
    import torch
    if args.mode == 'train':
        fn(x, hw).sum().backward()
    else:
        with torch.no_grad():
            fn(x, hw)


def _prepare(args):
    """Threads, the model in the right mode, the input, one warm-up run."""
    import torch
    import vattn_mm  # noqa: F401

    torch.set_num_threads(args.threads)
    stage, fn = build(args, args.impl, args.device)
    stage.train(args.mode == 'train')
    x, hw = tokens(args, args.size, args.device)
    small, small_hw = tokens(args, (64, 64), args.device)
    run_once(args, fn, small, small_hw)                    # warm-up: kernels, thread pools
    return stage, fn, x, hw


def time_worker(args) -> dict:
    """Time of one (impl, device, scope, mode) in this fresh process."""
    from vattn_mm.analysis.bench import time_steps
    stage, fn, x, hw = _prepare(args)

    def step() -> None:
        stage.zero_grad(set_to_none=True)
        run_once(args, fn, x.clone(), hw)      # inference adds the residuals into the input
    timing = time_steps({'step': step}, args.repeat)['step']
    return dict(time=timing.median_s, iqr=timing.iqr_s, runs=timing.runs)


def memory_worker(args) -> dict:
    """Peak memory of one run in this fresh process (restarted with the
    malloc settings :class:`PeakMemory` needs on CPU)."""
    from bench_workers import exec_with_mmap_malloc

    from vattn_mm.analysis.bench import PeakMemory
    if args.device == 'cpu':
        exec_with_mmap_malloc()
    stage, fn, x, hw = _prepare(args)
    stage.zero_grad(set_to_none=True)
    xi = x.clone()
    with PeakMemory(args.device) as peak:
        run_once(args, fn, xi, hw)
    return dict(peak=peak.bytes)


def max_abs_diff(args) -> dict:
    """Largest difference between the two implementations' outputs."""
    import torch
    import vattn_mm  # noqa: F401

    torch.set_num_threads(args.threads)
    outs = []
    for impl in IMPLS:
        stage, fn = build(args, impl, args.device)
        stage.eval()
        x, hw = tokens(args, args.size, args.device)
        with torch.no_grad():
            outs.append(fn(x, hw))
        del stage, fn
    return dict(diff=(outs[0] - outs[1]).abs().max().item())


def info(args) -> dict:
    import torch
    return dict(torch=torch.__version__, cuda=torch.cuda.is_available())


TASKS = dict(time=time_worker, memory=memory_worker, diff=max_abs_diff, info=info)


def spawn(args, task: str, **overrides) -> dict:
    """Run ``task`` in a fresh interpreter.  This process never imports torch:
    a child's ``ru_maxrss`` starts at its parent's resident size."""
    a = dict(vars(args), **overrides)
    cmd = [sys.executable, __file__, '--worker', task, '--arch', a['arch'],
           '--size', *map(str, a['size']), '--repeat', str(a['repeat']),
           '--threads', str(a['threads'])]
    for key in ('impl', 'device', 'scope', 'mode'):
        if a.get(key):
            cmd += [f'--{key}', a[key][0] if isinstance(a[key], list) else a[key]]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise RuntimeError(f'{task} {overrides} failed:\n{res.stderr}')
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--arch', default='small', choices=('tiny', 'small', 'base'))
    parser.add_argument('--size', type=int, nargs=2, default=(800, 1344), metavar=('H', 'W'),
                        help='image size; the first stage runs at ceil(size / 4)')
    parser.add_argument('--device', choices=('cpu', 'cuda'), action='append',
                        help='default: cpu, and cuda when available')
    parser.add_argument('--scope', choices=('msda', 'stage'), action='append')
    parser.add_argument('--mode', choices=('inference', 'train'), action='append')
    parser.add_argument('--repeat', type=int, default=3,
                        help='timing budget in runs (blocked_autorange; median reported)')
    parser.add_argument('--threads', type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    parser.add_argument('--worker', choices=sorted(TASKS), help=argparse.SUPPRESS)
    parser.add_argument('--impl', choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        for key in ('device', 'scope', 'mode'):
            value = getattr(args, key)
            setattr(args, key, value[0] if value else None)
        print(json.dumps(TASKS[args.worker](args)))
        return

    env = spawn(args, 'info')
    devices = args.device or ['cpu'] + (['cuda'] if env['cuda'] else [])
    h, w = ((s + 3) // 4 for s in args.size)
    print(f'DilateFormer-{args.arch[0].upper()}, first stage, input 1x3x{args.size[0]}x'
          f'{args.size[1]} -> {h}x{w} tokens, torch {env["torch"]}, '
          f'{args.threads} CPU threads\n')
    print('| scope | mode | device | implementation | time (ms) | IQR (ms) | runs '
          '| peak memory (MiB) | memory unfold / ours | max abs diff |')
    print('|---|---|---|---|---:|---:|---:|---:|---:|---:|')
    for device in devices:
        for scope in args.scope or ['msda', 'stage']:
            diff = spawn(args, 'diff', device=device, scope=scope)['diff']
            for mode in args.mode or ['inference', 'train']:
                case = dict(device=device, scope=scope, mode=mode)
                res = {impl: {**spawn(args, 'time', impl=impl, **case),
                              **spawn(args, 'memory', impl=impl, **case)} for impl in IMPLS}
                ratio = res['unfold']['peak'] / max(res['ours']['peak'], 1)
                for impl in IMPLS:
                    r = res[impl]
                    print(f"| {scope} | {mode} | {device} | {impl} | {1e3 * r['time']:.1f} | "
                          f"{1e3 * r['iqr']:.1f} | {r['runs']} | {r['peak'] / 2 ** 20:.1f} | "
                          f"{f'{ratio:.2f}x' if impl == 'ours' else ''} | "
                          f"{f'{diff:.2e}' if impl == 'ours' else ''} |", flush=True)


if __name__ == '__main__':
    main()

"""Time and peak memory of DilateFormer's first stage: our per-offset
multi-scale dilated attention vs the official ``nn.Unfold`` formulation, the
library of ``.dev_scripts/op_benchmarks/benchmark_dilated_attention.py``.

Every measurement runs in a fresh worker process that the tool starts
(:func:`worker`) so that peaks do not mix:

* time: after a warm-up on a tiny input, ``torch.utils.benchmark``'s
  ``blocked_autorange`` for about ``repeat`` runs, each on a fresh copy of
  the input (:func:`.timing.time_steps`; median, interquartile range and
  timed runs reported);
* in another process, the memory one run adds to what the imports, the
  model, the input and the warm-up hold (:class:`.memory.PeakMemory`: on CPU
  the process's high-water mark, the process started with glibc serving big
  blocks with ``mmap`` so that freed memory leaves the resident set at once;
  ``torch.cuda.max_memory_allocated()`` on CUDA).

Scopes: ``msda`` = the attention layer of the first block (input: normalised
tokens), ``stage`` = all blocks of the first stage (positional convs, MSDA,
MLPs).  Modes: ``inference`` (``torch.no_grad``) and ``train`` (forward and
backward).  The largest difference between the two outputs is measured at the
same size (in another process).  :func:`run` prints one markdown table.

A worker's spec: ``task`` (a key of :data:`TASKS`), ``arch``, ``size``,
``repeat``, ``threads`` and, as the task needs them, ``impl`` (one of
:data:`IMPLS`), ``device``, ``scope`` and ``mode``.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
from torch import nn

from vattn_mm.analysis.bench import markdown_row, step_peak_bytes, time_steps

IMPLS = ('unfold', 'ours')
SCOPES = ('msda', 'stage')
MODES = ('inference', 'train')


def unfold_forward(module, x, hw):
    """Official ``MultiDilatelocalAttention`` computation (k*k ``nn.Unfold``
    copies of keys and values) with ``module``'s weights; one group at a time
    in a function call, writing the group-major output like the official code."""
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


def build(spec: dict, impl: str):
    """First stage of the model and a function running the chosen scope."""
    from vattn_mm.backbones import DilateFormer
    from vattn_mm.layers import MultiScaleDilatedAttention

    torch.manual_seed(0)
    model = DilateFormer(spec['arch'], drop_path_rate=0.)
    model.init_weights()
    stage = model.stages[0].to(spec['device'])
    if impl == 'unfold':
        for m in stage.modules():
            if isinstance(m, MultiScaleDilatedAttention):
                m.forward = (lambda mod: lambda x, hw: unfold_forward(mod, x, hw))(m)
    if spec['scope'] == 'msda':
        block = stage.blocks[0]
        return stage, lambda x, hw: block.attn(x, hw)
    return stage, lambda x, hw: model.run_stage(stage, x, hw)


def tokens(spec: dict, size: Sequence[int]):
    """Random first-stage tokens of a ``size`` image and their map size."""
    from vattn_mm.backbones import DilateFormer
    h, w = ((s + 3) // 4 for s in size)
    c = DilateFormer.arch_zoo[spec['arch']]['embed_dim']
    gen = torch.Generator().manual_seed(1)
    return torch.randn(1, h * w, c, generator=gen).to(spec['device']), (h, w)


def run_once(spec: dict, fn, x, hw) -> None:
    if spec['mode'] == 'train':
        fn(x, hw).sum().backward()
    else:
        with torch.no_grad():
            fn(x, hw)


def _prepare(spec: dict):
    """Threads, the model in the right mode, the input, one warm-up run."""
    torch.set_num_threads(spec['threads'])
    stage, fn = build(spec, spec['impl'])
    stage.train(spec['mode'] == 'train')
    x, hw = tokens(spec, spec['size'])
    small, small_hw = tokens(spec, (64, 64))
    run_once(spec, fn, small, small_hw)                    # warm-up: kernels, thread pools
    return stage, fn, x, hw


def time_worker(spec: dict) -> dict:
    """Time of one (impl, device, scope, mode) in this fresh process."""
    stage, fn, x, hw = _prepare(spec)

    def step() -> None:
        stage.zero_grad(set_to_none=True)
        run_once(spec, fn, x.clone(), hw)      # inference adds the residuals into the input
    timing = time_steps({'step': step}, spec['repeat'])['step']
    return dict(time=timing.median_s, iqr=timing.iqr_s, runs=timing.runs)


def memory_worker(spec: dict) -> dict:
    """Peak memory of one run in this fresh process (on CPU started with
    the malloc settings :class:`.memory.PeakMemory` needs)."""
    stage, fn, x, hw = _prepare(spec)
    xi = x.clone()
    return dict(peak=step_peak_bytes(lambda: run_once(spec, fn, xi, hw), spec['device'], stage))


def max_abs_diff(spec: dict) -> dict:
    """Largest difference between the two implementations' outputs."""
    torch.set_num_threads(spec['threads'])
    outs = []
    for impl in IMPLS:
        stage, fn = build(spec, impl)
        stage.eval()
        x, hw = tokens(spec, spec['size'])
        with torch.no_grad():
            outs.append(fn(x, hw))
        del stage, fn
    return dict(diff=(outs[0] - outs[1]).abs().max().item())


def info(spec: dict) -> dict:
    return dict(torch=torch.__version__, cuda=torch.cuda.is_available())


TASKS = dict(time=time_worker, memory=memory_worker, diff=max_abs_diff, info=info)


def worker(spec: dict) -> dict:
    """Run ``spec['task']`` in this (fresh) process."""
    return TASKS[spec['task']](spec)


def run(run_worker: Callable[[dict], dict], *, arch: str = 'small',
        size: Sequence[int] = (800, 1344), devices: Optional[Sequence[str]] = None,
        scopes: Sequence[str] = SCOPES, modes: Sequence[str] = MODES, repeat: int = 3,
        threads: int = 1) -> None:
    """Measure every (device, scope, mode, impl), each by
    ``run_worker(spec)`` (:func:`worker` in a fresh process of the tool's),
    and print the table, a row as it is measured; ``devices`` defaults to
    the CPU and, where there is one, CUDA."""
    base = dict(arch=arch, size=list(size), repeat=repeat, threads=threads)

    def spawn(task: str, **case) -> dict:
        return run_worker(dict(base, task=task, **case))

    env = spawn('info')
    devices = devices or ['cpu'] + (['cuda'] if env['cuda'] else [])
    h, w = ((s + 3) // 4 for s in size)
    print(f'DilateFormer-{arch[0].upper()}, first stage, input 1x3x{size[0]}x'
          f'{size[1]} -> {h}x{w} tokens, torch {env["torch"]}, '
          f'{threads} CPU threads\n')
    print('| scope | mode | device | implementation | time (ms) | IQR (ms) | runs '
          '| peak memory (MiB) | memory unfold / ours | max abs diff |')
    print('|---|---|---|---|---:|---:|---:|---:|---:|---:|')
    for device in devices:
        for scope in scopes:
            diff = spawn('diff', device=device, scope=scope)['diff']
            for mode in modes:
                case = dict(device=device, scope=scope, mode=mode)
                res = {impl: {**spawn('time', impl=impl, **case),
                              **spawn('memory', impl=impl, **case)} for impl in IMPLS}
                ratio = res['unfold']['peak'] / max(res['ours']['peak'], 1)
                for impl in IMPLS:
                    r = res[impl]
                    print(markdown_row((
                        scope, mode, device, impl, f"{1e3 * r['time']:.1f}",
                        f"{1e3 * r['iqr']:.1f}", r['runs'], f"{r['peak'] / 2 ** 20:.1f}",
                        f'{ratio:.2f}x' if impl == 'ours' else '',
                        f'{diff:.2e}' if impl == 'ours' else '')), flush=True)

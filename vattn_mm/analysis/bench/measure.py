"""One case measured in this process (:func:`measure`), meant to be a fresh
one started by the tools (``tools/analysis/bench_workers.py``), and where its
time goes by operator (:func:`profile_case`)."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Sequence

from .cases import Case
from .memory import PeakMemory, peaks_of, resident_bytes
from .runtimes import runtime
from .steps import Steps, build_steps, flat_tensors, plain_twin
from .timing import clock, matmul_gflops, time_steps

#: ``train_cp``: blocks per side after the first, the sides alternating
PAIR_ROUNDS = 2


def measure(case: Case, parts: Sequence[str] = ('time', 'memory')) -> dict:
    """Measure ``parts`` of ``case`` in this process: ``'time'`` gives the
    latency with its spread and run count (:func:`.timing.time_steps`), the
    matmul peak and threads (for ``train_cp`` also the time ratio to the
    plain step), ``'memory'`` what the process pays (on CPU only in a process
    started with :data:`.memory.MMAP_MALLOC_ENV`):

    * ``first_peak_mib``: the first iteration's peak above the memory held
      once the model and its input were built;
    * ``held_mib``: what the process still holds after the warm-up
      iterations, with the gradients freed (as at the start of the next
      step), above that same mark: buffers, caches and workspaces that
      outlive a step;
    * ``step_peak_mib``: a steady-state iteration's own peak above what it
      started with;
    * ``peak_mib`` = ``held_mib + step_peak_mib``, the figure reported as
      the peak.
    """
    import torch
    import torch.utils.benchmark  # noqa: F401  (its import is no part of the first step's peak)
    if case.threads:
        torch.set_num_threads(case.threads)
    memory = 'memory' in parts
    steps = build_steps(case)
    model, step = steps.model, steps.step
    out: dict[str, Any] = dict(threads=torch.get_num_threads())
    built = resident_bytes(case.device) if memory else 0
    with PeakMemory(case.device) if memory else contextlib.nullcontext() as first_peak:
        start = clock()
        step()                                 # a compiling runtime compiles here
        first = clock() - start
    if runtime(case.runtime).compiles and 'time' in parts:
        out['compile_s'] = first
    for _ in range(max(case.warmup, 1) - 1):
        step()
    if memory:
        out['first_peak_mib'] = (first_peak.base + first_peak.bytes - built) / 2**20
        model.zero_grad(set_to_none=True)      # the step's gradients count in its peak
        held = resident_bytes(case.device) - built
        peak, part_mib = peaks_of(step, case.device, steps.parts if case.mode == 'fwd' else {})
        out.update(held_mib=held / 2**20, step_peak_mib=peak.bytes / 2**20,
                   peak_mib=(held + peak.bytes) / 2**20, memory_method=peak.method)
        if part_mib:
            out['part_peaks_mib'] = part_mib
    if 'time' in parts:
        out.update(_timing(case, steps))
    return out


def _timing(case: Case, steps: Steps) -> dict:
    """Latency (:func:`.timing.time_steps` with ``case.iters``), the matmul
    peak and, for ``train_cp``, the time ratio to a plain twin (warmed up
    here) timed in alternating blocks; in ``fwd`` mode other than eager fp32
    also ``max_dev``."""
    out: dict[str, Any] = {}
    timed = {'case': steps.step}
    if case.mode == 'train_cp':
        timed['plain'] = plain_twin(case, steps.model)
        for _ in range(max(case.warmup, 1)):
            timed['plain']()
    if case.mode == 'fwd' and (case.dtype, case.runtime) != ('fp32', 'eager'):
        out['max_dev'] = steps.deviation()
    out['mm_gflops'] = matmul_gflops(case.device, case.dtype)
    times = time_steps(timed, case.iters, PAIR_ROUNDS if len(timed) > 1 else 1)
    own = times['case']
    out.update(latency_ms=own.median_s * 1e3, latency_iqr_ms=own.iqr_s * 1e3, runs=own.runs,
               load1=os.getloadavg()[0])
    if 'plain' in times:
        out['cp_time_ratio'] = own.median_s / times['plain'].median_s
    return out


def profile_case(case: Case, top: int = 12) -> str:
    """Where one iteration of ``case`` spends its time, by operator: the
    autograd profiler's self CPU time of the ``top`` costliest operators,
    for a training step the forward and the backward apart (after
    ``case.warmup`` iterations, in this process); runtime onnxruntime:
    its own profiler's kernel time by operator type of the optimised graph.
    A markdown section."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if case.threads:
        torch.set_num_threads(case.threads)
    steps = build_steps(case)
    for _ in range(max(case.warmup, 1)):
        steps.step()
    if case.runtime == 'onnxruntime':
        return _onnx_profile(case, steps, top)
    phases = []
    if case.mode == 'fwd':
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            steps.step()
        phases.append(('forward (inference)', prof))
    else:
        steps.model.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CPU]) as fwd:
            with steps.autocast():
                outs = flat_tensors(steps.forward(steps.images))
            loss = sum(t.float().sum() for t in outs if t.requires_grad)
        with profile(activities=[ProfilerActivity.CPU]) as bwd:
            loss.backward()
        phases += [('forward', fwd), ('backward', bwd)]
    lines = [f'{case.label}, {torch.get_num_threads()} threads:']
    for phase, prof in phases:
        # self times of the operators (profiler-only labels such as the
        # autograd engine's per-node records are wrappers, not work)
        events = [e for e in prof.key_averages() if not e.key.startswith(('autograd::', '## '))]
        total = sum(e.self_cpu_time_total for e in events)
        lines += ['', f'{phase}: {total / 1e3:.0f} ms of operator time', '',
                  '| operator | calls | self time (ms) | share |', '|---|---|---|---|']
        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]:
            lines.append(f'| `{e.key}` | {e.count} | {e.self_cpu_time_total / 1e3:.1f} | '
                         f'{e.self_cpu_time_total / total:.0%} |')
    return '\n'.join(lines)


def _onnx_profile(case: Case, steps: Any, top: int) -> str:
    """:func:`profile_case` of an onnxruntime case: one run under
    onnxruntime's profiler."""
    import torch

    from vattn_mm.deploy.runtime import onnx_op_times
    times = onnx_op_times(steps.forward, steps.images)
    total = sum(us for _, us in times.values())
    lines = [f'{case.label}, onnxruntime, {torch.get_num_threads()} threads:', '',
             f'forward (inference): {total / 1e3:.0f} ms of kernel time', '',
             '| operator type | calls | kernel time (ms) | share |', '|---|---|---|---|']
    for op, (calls, us) in sorted(times.items(), key=lambda item: -item[1][1])[:top]:
        lines.append(f'| `{op}` | {calls} | {us / 1e3:.1f} | {us / total:.0%} |')
    return '\n'.join(lines)

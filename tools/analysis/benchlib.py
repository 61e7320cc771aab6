"""Latency, throughput, peak memory and fraction of the machine's matmul peak
of a backbone or a whole config: the measuring processes and reports behind
``tools/analysis/benchmark.py``, and :class:`PeakMemory` for the other
benchmark scripts of this folder (they import it as a sibling module).

Every case (target, input size, mode) runs in a fresh interpreter
(``python tools/analysis/benchlib.py --worker JSON``) so that peaks do not
mix (:class:`CaseWorkers` keeps its two interpreters for a series of cases,
each with its own model):

* the model is built, the input created and ``warmup`` iterations run;
* ``torch.mm`` of two 2048x2048 matrices of the run's dtype gives the
  machine's matmul peak (GFLOP/s, best of 5);
* ``iters`` timed iterations (synchronised on CUDA) with the allocator as
  users have it; the reported latency is their median;
* the peak memory is what the process pays, measured by
  :class:`PeakMemory` and :func:`resident_bytes`: on CUDA
  ``torch.cuda.max_memory_allocated``; on CPU in a second fresh interpreter
  started with :data:`MMAP_MALLOC_ENV` (glibc serves every block over 64 KiB
  with ``mmap`` and unmaps it on ``free``, so the process's resident size and
  high-water mark ``VmHWM`` follow the live tensors; timing in that mode
  would add a page fault per page of every large temporary, which is why
  time and memory come from separate processes).  Reported: the memory the
  process still holds after the warm-up iterations above what it held once
  the model and input were built (buffers, caches and workspaces kept
  between iterations; the gradients are freed first, as ``zero_grad`` does
  at the next step's start), plus the high-water mark of one steady
  iteration above its start (every transient buffer and, for training, the
  gradients included); the first iteration's peak is reported beside it
  (:func:`measure`).

Modes: ``fwd`` = eval-mode forward under ``torch.no_grad``; ``train`` =
train-mode forward + backward of the sum of the outputs (no optimizer step);
``train_cp`` = the same step with the backbone's ``with_cp=True`` (activation
checkpointing).  Its timing process also builds the plain model (same
weights) and alternates the two steps, one plain then one checkpointed per
timed iteration: the reported time ratio is the median of the per-pair
ratios, so a machine that speeds up or slows down during the run (a shared
host does) changes both sides of each ratio alike.
Runtimes (:data:`RUNTIMES`): ``eager`` runs the model as it is; ``compile``
wraps its forward in ``torch.compile`` (inductor, default mode) once in the
worker, and the first iteration (forward and, in training modes, backward
compiled) is timed apart as the compile time (``*_compile_s``: compilation
plus one run), not in the latency; ``onnxruntime`` (forward, fp32, CPU)
exports the forward to ONNX in the worker and runs it in an onnxruntime
session with the case's threads.  Dtypes: ``fp16`` / ``bf16`` run under
autocast.  In ``fwd`` mode a case other than eager fp32 also reports
``max_dev``: the largest deviation of its outputs from the same model's eager
fp32 outputs, relative to the largest fp32 output magnitude.  The report
gives the speed of each runtime / dtype against eager / fp32 of the same
model, input and device (``vs eager`` / ``vs fp32``: their time over this
one's, > 1 = faster).

Fraction of peak = ``2 * MACs / latency`` over the matmul GFLOP/s, with the
MACs from :func:`vattn_mm.analysis.spec_complexity`; a training step
is taken as 3x the forward MACs (backward = 2x forward).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

MODES = ('fwd', 'train', 'train_cp')
#: what a run measures unless told otherwise
DEFAULT_MODES = ('fwd', 'train')
DTYPES = ('fp32', 'fp16', 'bf16')
#: MACs of a training step relative to the forward
TRAIN_MAC_FACTOR = 3
_MM_SIZE = 2048
#: glibc settings for CPU peak-memory processes: blocks over 64 KiB are
#: mmap-ed and unmapped on free, freed heap memory is returned at once.  They
#: must hold from the start of the process: switched on later, glibc keeps
#: serving big blocks from the free chunks its heap already has, and every
#: page such a block touches stays resident after its free, so the
#: high-water mark would count memory that was freed long before the peak.
MMAP_MALLOC_ENV = {'MALLOC_MMAP_THRESHOLD_': str(64 * 1024), 'MALLOC_TRIM_THRESHOLD_': '0'}


@dataclass
class Case:
    """One measurement: what to run and how."""

    target: str
    shape: tuple[int, int]
    mode: str = 'fwd'
    device: str = 'cpu'
    dtype: str = 'fp32'
    warmup: int = 2
    iters: int = 5
    threads: Optional[int] = None
    #: how the model runs: a :data:`RUNTIMES` name
    runtime: str = 'eager'
    #: ``'module:function'`` building ``target`` instead of
    #: :func:`vattn_mm.analysis.build_target`: a sibling script of this file
    #: (e.g. ``'zoo:build_zoo_target'``) called as ``fn(target, with_cp=...,
    #: device=...)`` and returning a :class:`vattn_mm.analysis.Target`
    builder: str = ''


@dataclass
class Measurement:
    """What a worker reports for one :class:`Case`."""

    latency_ms: float
    peak_mib: float
    mm_gflops: float
    threads: int
    memory_method: str
    #: 1-minute load average when the timed iterations ended (busy machine?)
    load1: float
    #: ``train_cp`` only: median over timed iterations of (with_cp step time /
    #: plain step time), the two steps run back to back
    cp_time_ratio: Optional[float] = None
    #: compiling runtimes: seconds of the first iteration (compilation + one run)
    compile_s: Optional[float] = None
    #: ``fwd`` of a case other than eager fp32: largest |output - eager fp32
    #: output| over the largest |eager fp32 output|
    max_dev: Optional[float] = None
    #: eager ``fwd``: peak of each of the target's ``parts`` during its own
    #: forward, inside the measured iteration (MiB)
    part_peaks_mib: Optional[dict] = None
    #: what :func:`measure` reports beside ``peak_mib`` (= held + step peak):
    #: memory kept between iterations, a steady iteration's own peak, the
    #: first iteration's peak (MiB)
    held_mib: Optional[float] = None
    step_peak_mib: Optional[float] = None
    first_peak_mib: Optional[float] = None


@dataclass
class Row:
    """One (target, input size) line of the report."""

    target: str
    shape: str
    device: str
    dtype: str
    params_m: float
    gmacs: float
    runtime: str = 'eager'
    fwd_ms: Optional[float] = None
    img_per_s: Optional[float] = None
    #: what the process pays: memory held between iterations + one's peak
    fwd_peak_mib: Optional[float] = None
    #: the part of ``fwd_peak_mib`` held between iterations
    fwd_held_mib: Optional[float] = None
    #: largest forward peak of one of the target's token mixers (its ``mixer``
    #: part), where it names them
    fwd_mixer_peak_mib: Optional[float] = None
    fwd_frac_peak: Optional[float] = None
    train_ms: Optional[float] = None
    train_peak_mib: Optional[float] = None
    train_held_mib: Optional[float] = None
    #: the first training step's peak above the built model
    train_first_peak_mib: Optional[float] = None
    train_frac_peak: Optional[float] = None
    train_cp_ms: Optional[float] = None
    train_cp_peak_mib: Optional[float] = None
    #: with_cp step time over the plain step's, paired (see the module doc)
    cp_time_ratio: Optional[float] = None
    #: compiling runtimes: first forward / training step, compilation included
    fwd_compile_s: Optional[float] = None
    train_compile_s: Optional[float] = None
    #: forward outputs' largest deviation from eager fp32 (see :class:`Measurement`)
    max_dev: Optional[float] = None
    mm_gflops: Optional[float] = None
    threads: Optional[int] = None
    memory_method: str = ''
    load1: Optional[float] = None
    error: str = ''

    @property
    def cp_peak_change(self) -> Optional[float]:
        """Relative change of the training peak with with_cp (-0.6: 60 % less)."""
        if self.train_cp_peak_mib is None or not self.train_peak_mib:
            return None
        return self.train_cp_peak_mib / self.train_peak_mib - 1


# --------------------------------------------------------------- worker side
def _proc_status_kib(key: str) -> Optional[int]:
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def mmap_malloc_active() -> bool:
    """Whether this process was started with :data:`MMAP_MALLOC_ENV`."""
    return all(os.environ.get(k) == v for k, v in MMAP_MALLOC_ENV.items())


def exec_with_mmap_malloc() -> None:
    """Restart this process (same command line) with :data:`MMAP_MALLOC_ENV`
    unless it already has it: the first call of a CPU memory worker."""
    if not mmap_malloc_active():
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], memory_worker_env())


def _reset_cpu_peak() -> tuple[int, str]:
    """Lower the high-water mark to the current RSS; returns (bytes resident
    now, method name).  Where ``/proc`` cannot do it, falls back to the
    ``ru_maxrss`` reached so far (a lower bound: only what the run adds above
    the set-up's peak shows)."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        rss = _proc_status_kib('VmRSS')
        if rss is not None:
            return rss * 1024, 'VmHWM'
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 'ru_maxrss'


def resident_bytes(device: str = 'cpu') -> int:
    """Memory the process holds now: on CUDA the tensors allocated
    (``torch.cuda.memory_allocated``), on CPU the resident size (``VmRSS``;
    it follows the live tensors in a process started with
    :data:`MMAP_MALLOC_ENV`)."""
    if str(device).startswith('cuda'):
        import torch
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()
    rss = _proc_status_kib('VmRSS')
    if rss is None:
        raise RuntimeError('the resident size cannot be read (/proc/self/status has no VmRSS)')
    return rss * 1024


def _cpu_peak(method: str) -> int:
    if method == 'VmHWM':
        return _proc_status_kib('VmHWM') * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Peak memory that the code in a ``with`` block adds, in bytes::

        with PeakMemory(device) as peak:
            run()
        peak.bytes, peak.method

    CUDA: ``torch.cuda.max_memory_allocated()`` above what was allocated at
    entry.  CPU: the process must have been started with
    :data:`MMAP_MALLOC_ENV` (else ``RuntimeError``: the numbers would include
    freed memory); the process's high-water mark (``VmHWM``) is lowered to
    the resident size through ``/proc/self/clear_refs`` and read at exit;
    where that is not possible, ``ru_maxrss`` above its value at entry (a
    lower bound).  Use :func:`memory_worker_env` for the subprocess.
    """

    def __init__(self, device: str = 'cpu'):
        self.cuda = str(device).startswith('cuda')
        #: memory in use at entry (bytes); the peak is counted above it
        self.base = 0
        self.bytes, self.method = 0, ''

    def __enter__(self) -> 'PeakMemory':
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base, self.method = torch.cuda.memory_allocated(), 'cuda.max_memory_allocated'
        else:
            if not mmap_malloc_active():
                raise RuntimeError(
                    'PeakMemory on CPU needs a process started with the environment '
                    f'{MMAP_MALLOC_ENV} (see memory_worker_env): without it freed heap '
                    'blocks count as resident and the peak is overstated')
            self.base, self.method = _reset_cpu_peak()
        return self

    def __exit__(self, *exc) -> None:
        self.bytes = max(self.absolute_peak() - self.base, 0)

    def absolute_peak(self) -> int:
        """The high-water mark now (bytes), since the last reset (this
        meter's entry or a later one's)."""
        if self.cuda:
            import torch
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        return _cpu_peak(self.method)


def memory_worker_env() -> dict:
    """This process's environment with :data:`MMAP_MALLOC_ENV`, for a
    subprocess that measures CPU peak memory."""
    return {**os.environ, **MMAP_MALLOC_ENV}


def _torch_dtype(name: str):
    import torch
    return dict(fp32=torch.float32, fp16=torch.float16, bf16=torch.bfloat16)[name]


def matmul_gflops(device: str, dtype: str = 'fp32', repeat: int = 5) -> float:
    """Best GFLOP/s of ``torch.mm`` on two 2048x2048 matrices."""
    import torch
    a = torch.randn(_MM_SIZE, _MM_SIZE, device=device, dtype=_torch_dtype(dtype))
    b = torch.randn_like(a)
    best = float('inf')
    for i in range(repeat + 2):
        _sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        if i >= 2:
            best = min(best, time.perf_counter() - start)
    return 2 * _MM_SIZE ** 3 / best / 1e9


def _sync(device: str) -> None:
    import torch
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def _flat_tensors(out: Any) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in _flat_tensors(item)]
    return []


# ------------------------------------------------------------------ runtimes
@dataclass(frozen=True)
class Runtime:
    """How a case's model runs.  ``prepare(target, case)`` gets the built
    eager :class:`vattn_mm.analysis.Target` (weights initialised, on the
    case's device) and returns the target to measure: the same ``model``
    (its parameters are what training steps differentiate) with a new
    ``forward``; ``modes``: the modes it can measure; ``compiles``: its first
    iteration compiles (timed apart, see the module doc)."""

    prepare: Callable[[Any, Case], Any]
    modes: tuple[str, ...] = MODES
    compiles: bool = False


def _eager(target: Any, case: Case) -> Any:
    return target


def _inductor(target: Any, case: Case) -> Any:
    """``torch.compile`` (inductor, default mode) of the forward; compiled at
    its first call, the backward at the first backward."""
    import torch
    return replace(target, forward=torch.compile(target.forward))


def _onnxruntime(target: Any, case: Case) -> Any:
    """The forward exported to ONNX (dynamic height and width, export size
    ``case.shape``: :func:`vattn_mm.deploy.export_onnx`) and run by
    an onnxruntime CPU session with the case's threads; fp32, CPU, inference."""
    import tempfile

    import torch
    from torch import nn

    from vattn_mm.deploy import OnnxModel, export_onnx
    if case.device != 'cpu' or case.dtype != 'fp32':
        raise ValueError(f'runtime onnxruntime measures fp32 on the CPU, not {case.dtype} on '
                         f'{case.device}')

    class Forward(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = target.model

        def forward(self, images: torch.Tensor) -> Any:
            return target.forward(images)
    with tempfile.TemporaryDirectory(prefix='vattn-onnx-') as tmp:
        path = Path(tmp) / 'model.onnx'
        export_onnx(Forward(), path, case.shape)
        session = OnnxModel(path, case.threads or torch.get_num_threads())
    return replace(target, forward=session)


#: runtime name -> :class:`Runtime`; another runtime is one entry
RUNTIMES: dict[str, Runtime] = {
    'eager': Runtime(_eager),
    'compile': Runtime(_inductor, compiles=True),
    'onnxruntime': Runtime(_onnxruntime, modes=('fwd', )),
}


def _runtime(name: str) -> Runtime:
    if name not in RUNTIMES:
        raise ValueError(f'unknown runtime {name!r}; choose from {sorted(RUNTIMES)}')
    return RUNTIMES[name]


@dataclass
class Steps:
    """A built case: its model, one iteration of its mode (a training step
    frees the previous gradients first, as optimizers' ``zero_grad`` does)
    and, in ``fwd`` mode, :meth:`deviation` from eager fp32."""

    model: Any
    step: Callable[[], None]
    eager_forward: Callable[[Any], Any]
    forward: Callable[[Any], Any]
    images: Any
    autocast: Callable[[], Any]
    #: the target's parts whose forward peaks are measured (eager only)
    parts: dict

    def deviation(self) -> float:
        """Largest |output - eager fp32 output| over the largest |eager fp32
        output|, over all output tensors (eval mode, no autograd)."""
        import torch
        with torch.no_grad():
            ref = _flat_tensors(self.eager_forward(self.images))
            with self.autocast():
                out = _flat_tensors(self.forward(self.images))
        if len(out) != len(ref) or not ref:
            raise RuntimeError(f'{len(out)} outputs but eager fp32 gives {len(ref)}')
        return max(float((o.float() - r.float()).abs().max()
                         / r.float().abs().max().clamp_min(1e-30)) for o, r in zip(out, ref))


def _step_fn(case: Case) -> Steps:
    """Build the target under ``case.runtime``; return its :class:`Steps`."""
    import torch

    runtime = _runtime(case.runtime)
    if case.mode not in runtime.modes:
        raise ValueError(f'runtime {case.runtime!r} cannot measure mode {case.mode!r} '
                         f'(it measures {runtime.modes})')
    eager = _target_builder(case.builder)(case.target, with_cp=case.mode == 'train_cp',
                                          device=case.device)
    target = runtime.prepare(eager, case)
    model = target.model
    images = torch.randn(1, 3, *case.shape, device=case.device)
    amp = case.dtype != 'fp32'
    autocast = lambda: torch.autocast(torch.device(case.device).type,  # noqa: E731
                                      dtype=_torch_dtype(case.dtype), enabled=amp)
    if case.mode == 'fwd':
        model.eval()

        def step() -> None:
            with torch.no_grad(), autocast():
                target.forward(images)
    else:
        model.train()

        def step() -> None:
            model.zero_grad(set_to_none=True)
            with autocast():
                outs = _flat_tensors(target.forward(images))
            loss = sum(t.float().sum() for t in outs if t.requires_grad)
            loss.backward()
    parts = getattr(eager, 'parts', {}) if target is eager else {}
    return Steps(model, step, eager.forward, target.forward, images, autocast, parts)


def _target_builder(builder: str) -> Callable[..., Any]:
    """The function that builds a case's target (see :attr:`Case.builder`)."""
    if not builder:
        from vattn_mm.analysis import build_target
        return build_target
    module, _, name = builder.partition(':')
    if not module or not name:
        raise ValueError(f"builder must be 'module:function', got {builder!r}")
    import importlib   # a sibling script of this folder, which the worker runs from
    return getattr(importlib.import_module(module), name)


def _plain_twin(case: Case, model: Any) -> Callable[[], None]:
    """The training step of ``case.target`` without with_cp, with ``model``'s
    weights (the other half of a ``train_cp`` timing pair)."""
    twin = _step_fn(replace(case, mode='train'))
    twin.model.load_state_dict(model.state_dict())
    return twin.step


def _timed(step: Callable[[], None], device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - start


def measure(case: Case, parts: Sequence[str] = ('time', 'memory')) -> dict:
    """Measure ``parts`` of ``case`` in this process (meant to be a fresh
    one): ``'time'`` gives latency, matmul peak and threads (for
    ``train_cp`` also the paired time ratio), ``'memory'`` what the process
    pays (on CPU only in a process started with :data:`MMAP_MALLOC_ENV`):

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
    if case.threads:
        torch.set_num_threads(case.threads)
    memory = 'memory' in parts
    steps = _step_fn(case)
    model, step = steps.model, steps.step
    out: dict[str, Any] = dict(threads=torch.get_num_threads())
    built = resident_bytes(case.device) if memory else 0
    with PeakMemory(case.device) if memory else contextlib.nullcontext() as first_peak:
        first = _timed(step, case.device)      # a compiling runtime compiles here
    if _runtime(case.runtime).compiles and 'time' in parts:
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
    """Latency (median of ``case.iters`` iterations), the matmul peak and,
    for ``train_cp``, the paired time ratio against a plain twin (warmed up
    here); in ``fwd`` mode other than eager fp32 also ``max_dev``."""
    out: dict[str, Any] = {}
    plain = _plain_twin(case, steps.model) if case.mode == 'train_cp' else None
    for _ in range(max(case.warmup, 1) if plain is not None else 0):
        plain()
    _sync(case.device)
    if case.mode == 'fwd' and (case.dtype, case.runtime) != ('fp32', 'eager'):
        out['max_dev'] = steps.deviation()
    out['mm_gflops'] = matmul_gflops(case.device, case.dtype)
    times, ratios = [], []
    for _ in range(case.iters):
        plain_time = _timed(plain, case.device) if plain is not None else None
        times.append(_timed(steps.step, case.device))
        if plain_time is not None:
            ratios.append(times[-1] / plain_time)
    out.update(latency_ms=statistics.median(times) * 1e3, load1=os.getloadavg()[0])
    if ratios:
        out['cp_time_ratio'] = statistics.median(ratios)
    return out


def peaks_of(step: Callable[[], None], device: str, parts: dict
             ) -> tuple[PeakMemory, dict[str, float]]:
    """The peak memory of ``step()`` and, per name of ``parts`` (name ->
    modules), the largest peak (MiB) of one of those modules' forwards."""
    with PeakMemory(device) as peak, _PartPeaks(parts, peak) as part_peaks:
        step()
    # the parts' meters reset the high-water mark: the peak is the highest
    # mark of all the stretches between the resets
    peak.bytes = max(peak.bytes, part_peaks.highest - peak.base)
    return peak, part_peaks.mib


class _PartPeaks:
    """Per name of ``parts`` (name -> modules): the largest peak (MiB) of
    one of its modules' forwards above the memory in use when that forward
    starts, or when the enclosing measurement started if that is more
    (``.mib``): memory the step frees from before it started (heap trimmed,
    garbage collected) is not counted as the part's, so no part's peak is
    above the step's.  Each part's meter lowers the high-water mark when it
    starts, which forgets the peak so far: :attr:`highest` keeps the highest
    absolute mark read before every such reset and at every part's end, for
    the enclosing measurement."""

    def __init__(self, parts: dict, outer: PeakMemory):
        self.parts, self.outer = parts, outer
        self.mib: dict[str, float] = {}
        self.highest = 0
        self._handles: list = []

    def __enter__(self) -> '_PartPeaks':
        for name, modules in self.parts.items():
            for module in modules:
                meter = PeakMemory('cuda' if self.outer.cuda else 'cpu')

                def enter(module, args, meter=meter):
                    self.highest = max(self.highest, self.outer.absolute_peak())
                    meter.__enter__()
                    meter.base = max(meter.base, self.outer.base)

                def leave(module, args, output, name=name, meter=meter):
                    meter.__exit__(None, None, None)
                    self.highest = max(self.highest, self.outer.absolute_peak())
                    self.mib[name] = max(self.mib.get(name, 0.), meter.bytes / 2**20)
                self._handles += [module.register_forward_pre_hook(enter),
                                  module.register_forward_hook(leave)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def profile_case(case: Case, top: int = 12) -> str:
    """Where one iteration of ``case`` spends its time, by operator: the
    autograd profiler's self CPU time of the ``top`` costliest operators,
    for a training step the forward and the backward apart (after
    ``case.warmup`` iterations, in this process).  A markdown section."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if case.threads:
        torch.set_num_threads(case.threads)
    steps = _step_fn(case)
    for _ in range(max(case.warmup, 1)):
        steps.step()
    phases = []
    if case.mode == 'fwd':
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            steps.step()
        phases.append(('forward (inference)', prof))
    else:
        steps.model.zero_grad(set_to_none=True)
        with profile(activities=[ProfilerActivity.CPU]) as fwd:
            with steps.autocast():
                outs = _flat_tensors(steps.forward(steps.images))
            loss = sum(t.float().sum() for t in outs if t.requires_grad)
        with profile(activities=[ProfilerActivity.CPU]) as bwd:
            loss.backward()
        phases += [('forward', fwd), ('backward', bwd)]
    lines = [f'{case.target} {case.shape[0]}x{case.shape[1]} {case.mode}, '
             f'{torch.get_num_threads()} threads:']
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


# --------------------------------------------------------------- driver side
def _run_worker(case: Case, parts: Sequence[str], env: dict,
                timeout: Optional[float]) -> dict:
    """Measure ``parts`` of ``case`` in a fresh interpreter running this file."""
    cmd = [sys.executable, str(Path(__file__).resolve()), '--worker',
           json.dumps(asdict(case)), '--parts', *parts]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                         check=False)
    if res.returncode:
        lines = res.stderr.strip().splitlines()
        raise RuntimeError(f'{case.target} {case.shape[0]}x{case.shape[1]} {case.mode} failed '
                           f'(exit {res.returncode}): {lines[-1] if lines else "no output"}\n'
                           + '\n'.join(lines[-15:]))
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_case(case: Case, timeout: Optional[float] = None,
             one_process: bool = False, memory: bool = True) -> Measurement:
    """Measure ``case`` in fresh interpreters: time and CUDA memory in one, CPU
    memory in a second one started with :data:`MMAP_MALLOC_ENV`.
    ``one_process``: CPU time and memory in the one :data:`MMAP_MALLOC_ENV`
    process (half the start-ups; the time then includes the page faults of
    unmapped blocks: for smoke runs, not for reports).  ``memory=False``:
    time only (no peak)."""
    if one_process and memory and not case.device.startswith('cuda'):
        return Measurement(**_run_worker(case, ('time', 'memory'), memory_worker_env(), timeout))
    return _measurement(case, memory,
                        lambda parts, env: _run_worker(case, parts, env, timeout))


#: what a CPU memory process reports
_MEMORY_KEYS = ('peak_mib', 'memory_method', 'part_peaks_mib', 'held_mib', 'step_peak_mib',
                'first_peak_mib')


def _measurement(case: Case, memory: bool,
                 ask: Callable[[tuple, dict], dict]) -> Measurement:
    """The processes a case needs, each asked by ``ask(parts, env)``: time
    only; time and CUDA memory in one; CPU time, then CPU memory in a
    :data:`MMAP_MALLOC_ENV` process."""
    if not memory:
        return Measurement(**ask(('time', ), dict(os.environ)), peak_mib=None, memory_method='')
    if case.device.startswith('cuda'):
        return Measurement(**ask(('time', 'memory'), dict(os.environ)))
    timed = ask(('time', ), dict(os.environ))
    peak = ask(('memory', ), memory_worker_env())
    return Measurement(**{**timed, **{k: peak[k] for k in _MEMORY_KEYS if k in peak}})


class CaseWorkers:
    """:func:`run_case` with its interpreters kept for the next case: one
    timing and one memory process (started on first use), each measuring
    the cases sent to it one after another, every case with its own freshly
    built model.  Saves an interpreter start-up (several seconds of imports)
    per case and process where a series of cases runs, e.g. one model at
    growing sizes.  A case that fails or passes ``timeout`` ends its process
    (the next case starts a fresh one) and raises as :func:`run_case` does.
    Use as a context manager; :meth:`close` ends the processes."""

    _REPLY = '@@benchlib-result '

    def __init__(self) -> None:
        self._procs: dict = {}

    def __enter__(self) -> 'CaseWorkers':
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for kind in list(self._procs):
            self._stop(kind)

    def _stop(self, kind: str) -> str:
        """End the ``kind`` process; returns the tail of its stderr."""
        proc, err = self._procs.pop(kind)
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err.seek(0)
        tail = err.read().decode(errors='replace').strip().splitlines()[-15:]
        err.close()
        return '\n'.join(tail)

    def _ask(self, kind: str, case: Case, parts: Sequence[str], env: dict,
             timeout: Optional[float]) -> dict:
        import selectors
        import tempfile
        if kind not in self._procs:
            err = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), '--serve'], env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1)
            self._procs[kind] = (proc, err)
        proc = self._procs[kind][0]
        proc.stdin.write(json.dumps(dict(case=asdict(case), parts=list(parts))) + '\n')
        proc.stdin.flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0 or not sel.select(left):
                    proc.kill()
                    self._stop(kind)
                    raise subprocess.TimeoutExpired(f'{case.target} {case.mode}', timeout)
                line = proc.stdout.readline()
                if not line:
                    code = proc.wait()
                    tail = self._stop(kind)
                    raise RuntimeError(
                        f'{case.target} {case.shape[0]}x{case.shape[1]} {case.mode} failed '
                        f'(exit {code}): {tail.splitlines()[-1] if tail else "no output"}\n'
                        + tail)
                if line.startswith(self._REPLY):
                    return json.loads(line[len(self._REPLY):])

    def run_case(self, case: Case, timeout: Optional[float] = None,
                 memory: bool = True) -> Measurement:
        """:func:`run_case` (two processes on CPU) in the kept processes."""
        return _measurement(case, memory, lambda parts, env: self._ask(
            'memory' if parts == ('memory', ) else 'time', case, parts, env, timeout))


def _serve() -> None:
    """The :class:`CaseWorkers` process: a JSON request per stdin line, a
    reply line per request; a failing case exits the process."""
    for line in sys.stdin:
        request = json.loads(line)
        spec = dict(request['case'], shape=tuple(request['case']['shape']))
        out = measure(Case(**spec), request['parts'])
        print(CaseWorkers._REPLY + json.dumps(out), flush=True)


def parse_shape(text: str) -> tuple[int, int]:
    """``'800x1344'`` or ``'512'`` -> (H, W)."""
    parts = text.lower().split('x')
    try:
        sides = [int(p) for p in parts]
    except ValueError:
        sides = []
    if len(sides) == 1:
        sides *= 2
    if len(sides) != 2 or min(sides) < 1:
        raise ValueError(f'bad input size {text!r}: use HxW (e.g. 800x1344) or one side')
    return sides[0], sides[1]


def benchmark(targets: Sequence[str], shapes: Sequence[tuple[int, int]],
              modes: Sequence[str] = DEFAULT_MODES, *, dtypes: Sequence[str] = ('fp32', ),
              runtimes: Sequence[str] = ('eager', ), progress: bool = True,
              on_row: Optional[Callable[[Row], None]] = None, memory: bool = True,
              **case_kwargs) -> list[Row]:
    """Measure every target at every shape, dtype and runtime in every mode;
    one :class:`Row` per (target, shape, dtype, runtime).  A failed case is
    reported in ``Row.error`` and the others still run; a mode a runtime
    cannot measure is left empty; ``on_row`` sees each finished row (e.g. to
    save it)."""
    from tqdm import tqdm

    from vattn_mm.analysis import spec_complexity
    for kind, given, known in (('modes', modes, MODES), ('dtypes', dtypes, DTYPES),
                               ('runtimes', runtimes, tuple(RUNTIMES))):
        bad = sorted(set(given) - set(known))
        if bad:
            raise ValueError(f'unknown {kind} {bad}; choose from {known}')
    rows = []
    cases = [(dtype, runtime, mode) for dtype in dtypes for runtime in runtimes
             for mode in modes if mode in RUNTIMES[runtime].modes]
    bar = tqdm(total=len(targets) * len(shapes) * len(cases), disable=not progress,
               unit='case', dynamic_ncols=True)
    for target in targets:
        for shape in shapes:
            cx = spec_complexity(target, shape)
            for dtype in dtypes:
                for runtime in runtimes:
                    row = Row(target, f'{shape[0]}x{shape[1]}', case_kwargs.get('device', 'cpu'),
                              dtype, cx.params / 1e6, cx.macs / 1e9, runtime=runtime)
                    for mode in modes:
                        if mode not in RUNTIMES[runtime].modes:
                            continue
                        bar.set_description(f'{target} {row.shape} {dtype} {runtime} {mode}')
                        case = Case(target, shape, mode, dtype=dtype, runtime=runtime,
                                    **case_kwargs)
                        try:
                            fill_row(row, mode, run_case(case, memory=memory))
                        except (RuntimeError, subprocess.TimeoutExpired) as err:
                            row.error = f'{row.error}; {mode}: {err}'.lstrip('; ')
                        bar.update()
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
    bar.close()
    return rows


def fill_row(row: Row, mode: str, m: Measurement) -> None:
    """Put the measurement ``m`` of ``mode`` into ``row`` (fraction of peak
    from the row's GMACs)."""
    factor = 1 if mode == 'fwd' else TRAIN_MAC_FACTOR
    frac = 2 * factor * row.gmacs / (m.latency_ms / 1e3) / m.mm_gflops
    if mode == 'fwd':
        row.fwd_ms, row.fwd_peak_mib, row.fwd_frac_peak = m.latency_ms, m.peak_mib, frac
        row.fwd_held_mib = m.held_mib
        row.img_per_s = 1e3 / m.latency_ms
        row.fwd_mixer_peak_mib = (m.part_peaks_mib or {}).get('mixer')
        row.fwd_compile_s, row.max_dev = m.compile_s, m.max_dev
    elif mode == 'train':
        row.train_ms, row.train_peak_mib, row.train_frac_peak = m.latency_ms, m.peak_mib, frac
        row.train_held_mib, row.train_first_peak_mib = m.held_mib, m.first_peak_mib
        row.train_compile_s = m.compile_s
    else:
        row.train_cp_ms, row.train_cp_peak_mib = m.latency_ms, m.peak_mib
        row.cp_time_ratio = m.cp_time_ratio
    row.mm_gflops = m.mm_gflops if row.mm_gflops is None else max(row.mm_gflops, m.mm_gflops)
    row.threads, row.memory_method = m.threads, m.memory_method
    row.load1 = m.load1 if row.load1 is None else max(row.load1, m.load1)


# ---------------------------------------------------------------- reporting
_COLUMNS = [f.name for f in fields(Row)]
#: the per-mode measurements of a row
_MEASURED = ('fwd_ms', 'img_per_s', 'fwd_peak_mib', 'fwd_held_mib', 'fwd_mixer_peak_mib',
             'fwd_frac_peak', 'train_ms', 'train_peak_mib', 'train_held_mib',
             'train_first_peak_mib', 'train_frac_peak', 'train_cp_ms', 'train_cp_peak_mib',
             'cp_time_ratio', 'fwd_compile_s', 'train_compile_s', 'max_dev')
_MD = [('target', 'model', '{}'), ('shape', 'input', '{}'),
       ('runtime', 'runtime', '{}'), ('dtype', 'dtype', '{}'),
       ('params_m', 'params (M)', '{:.1f}'), ('gmacs', 'GMACs', '{:.3g}'),
       ('fwd_ms', 'fwd (ms)', '{:.0f}'), ('img_per_s', 'img/s', '{:.2f}'),
       ('fwd_vs_eager', 'fwd vs eager', '{:.2f}x'), ('fwd_vs_fp32', 'fwd vs fp32', '{:.2f}x'),
       ('max_dev', 'max dev vs fp32 eager', '{:.1e}'),
       ('fwd_compile_s', 'fwd compile (s)', '{:.1f}'),
       ('fwd_peak_mib', 'fwd peak (MiB)', '{:.0f}'), ('fwd_held_mib', 'fwd held (MiB)', '{:.0f}'),
       ('fwd_mixer_peak_mib', 'mixer fwd peak (MiB)', '{:.0f}'),
       ('fwd_frac_peak', 'fwd % of matmul peak', '{:.0%}'),
       ('train_ms', 'train step (ms)', '{:.0f}'), ('train_peak_mib', 'train peak (MiB)', '{:.0f}'),
       ('train_held_mib', 'train held (MiB)', '{:.0f}'),
       ('train_first_peak_mib', '1st step peak (MiB)', '{:.0f}'),
       ('train_frac_peak', 'train % of matmul peak', '{:.0%}'),
       ('train_vs_eager', 'train vs eager', '{:.2f}x'),
       ('train_vs_fp32', 'train vs fp32', '{:.2f}x'),
       ('train_compile_s', 'train compile (s)', '{:.1f}'),
       ('train_cp_ms', 'with_cp step (ms)', '{:.0f}'),
       ('train_cp_peak_mib', 'with_cp peak (MiB)', '{:.0f}'),
       ('cp_time_ratio', 'with_cp time', '{:.2f}x'),
       ('cp_peak_change', 'with_cp peak change', '{:+.0%}'),
       ('mm_gflops', 'mm GFLOP/s', '{:.0f}'), ('load1', 'load avg', '{:.1f}')]


def write_csv(rows: Iterable[Row], path: Path) -> None:
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: v for k, v in asdict(row).items() if k in _COLUMNS})


def _parse(text: str, annotation: str) -> Any:
    if text == '':
        return '' if annotation == 'str' else None
    if 'float' in annotation:
        return float(text)
    return int(text) if 'int' in annotation else text


def read_csv(path: Path) -> list[Row]:
    """Rows written by :func:`write_csv`."""
    types = {f.name: str(f.type) for f in fields(Row)}
    with open(path, newline='') as f:
        return [Row(**{k: _parse(v, types[k]) for k, v in rec.items() if k in types})
                for rec in csv.DictReader(f)]


def merge_rows(rows: Iterable[Row]) -> list[Row]:
    """Combine rows of the same (model, input, device, dtype) from several
    runs (e.g. a forward-only and a training-only run): the first value of
    each column wins; ``mm_gflops`` / ``load1`` are the highest of the rows
    that gave a value; errors are joined."""
    merged: dict[tuple, Row] = {}
    for row in rows:
        key = (row.target, row.shape, row.device, row.dtype, row.runtime)
        if key not in merged:
            merged[key] = Row(**asdict(row))
            continue
        into = merged[key]
        taken = [name for name in _MEASURED if getattr(into, name) is None
                 and getattr(row, name) is not None]
        for name in taken:
            setattr(into, name, getattr(row, name))
        if taken:
            into.mm_gflops = max(filter(None, (into.mm_gflops, row.mm_gflops)), default=None)
            into.load1 = max(filter(None, (into.load1, row.load1)), default=None)
        if row.error and row.error not in into.error:
            into.error = f'{into.error}; {row.error}'.lstrip('; ')
    return list(merged.values())


def series(row: Row) -> str:
    """The row's model with its runtime / dtype when not eager / fp32 (one
    line of a plot, one line of the growth table)."""
    extra = [v for v, plain in ((row.runtime, 'eager'), (row.dtype, 'fp32')) if v != plain]
    return ' '.join([row.target, *extra])


def _speedup(base: Optional[Row], row: Row, key: str) -> Optional[float]:
    """``base``'s time over ``row``'s (> 1: ``row`` is faster)."""
    if base is None or base is row or not getattr(base, key) or not getattr(row, key):
        return None
    return getattr(base, key) / getattr(row, key)


def report_values(rows: Sequence[Row]) -> list[dict]:
    """Each row's fields plus what the report derives: ``cp_peak_change`` and
    the speed-ups against the eager row (``*_vs_eager``) and the fp32 row
    (``*_vs_fp32``) of the same model, input, device and the other setting;
    ``runtime`` / ``dtype`` are None where every row is eager / fp32."""
    index = {(r.target, r.shape, r.device, r.dtype, r.runtime): r for r in rows}
    plain_runtime = all(r.runtime == 'eager' for r in rows)
    plain_dtype = all(r.dtype == 'fp32' for r in rows)
    out = []
    for row in rows:
        eager = index.get((row.target, row.shape, row.device, row.dtype, 'eager'))
        fp32 = index.get((row.target, row.shape, row.device, 'fp32', row.runtime))
        values = dict(asdict(row), cp_peak_change=row.cp_peak_change)
        values.update(runtime=None if plain_runtime else row.runtime,
                      dtype=None if plain_dtype else row.dtype)
        for mode in ('fwd', 'train'):
            values[f'{mode}_vs_eager'] = _speedup(eager, row, f'{mode}_ms')
            values[f'{mode}_vs_fp32'] = _speedup(fp32, row, f'{mode}_ms')
        out.append(values)
    return out


def markdown(rows: Sequence[Row]) -> str:
    """The report as a markdown table (columns without data are left out)."""
    values = report_values(rows)
    cols = [c for c in _MD if any(v[c[0]] is not None for v in values)]
    lines = ['| ' + ' | '.join(c[1] for c in cols) + ' |',
             '|' + '---|' * len(cols)]
    for v in values:
        cells = [fmt.format(v[key]) if v[key] is not None else '-' for key, _, fmt in cols]
        lines.append('| ' + ' | '.join(cells) + ' |')
    errors = [f'- {series(r)} {r.shape}: {r.error.splitlines()[0]}' for r in rows if r.error]
    return '\n'.join(lines + ([''] + errors if errors else []))


#: what :func:`growth_markdown` fits against the number of pixels (tokens)
_GROWTH = [('fwd_ms', 'fwd time'), ('fwd_peak_mib', 'fwd memory'),
           ('train_ms', 'train time'), ('train_peak_mib', 'train memory')]


def growth_exponent(points: Sequence[tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of ``log(value)`` against ``log(size)``: 1 for a
    cost linear in the number of tokens, 2 for quadratic.  None for fewer
    than two sizes or non-positive values."""
    points = [(x, y) for x, y in points if x > 0 and y and y > 0]
    if len({x for x, _ in points}) < 2:
        return None
    logs = [(math.log(x), math.log(y)) for x, y in points]
    mx = statistics.fmean(x for x, _ in logs)
    my = statistics.fmean(y for _, y in logs)
    return (sum((x - mx) * (y - my) for x, y in logs)
            / sum((x - mx) ** 2 for x, _ in logs))


def growth_markdown(rows: Sequence[Row]) -> str:
    """For models measured at three or more sizes: the growth exponent of
    time and memory in the number of pixels (= tokens), over all sizes and
    over the two largest (``all / top``); empty when there are none."""
    lines = []
    for target in dict.fromkeys(series(r) for r in rows):
        mine = sorted((r for r in rows if series(r) == target), key=lambda r: _pixels(r.shape))
        if len(mine) < 3:
            continue
        cells = []
        for key, _ in _GROWTH:
            pts = [(_pixels(r.shape), getattr(r, key)) for r in mine]
            whole, top = growth_exponent(pts), growth_exponent(pts[-2:])
            cells.append('-' if whole is None else
                         f'{whole:.2f} / {top:.2f}' if top is not None else f'{whole:.2f}')
        lines.append(f'| {target} | {mine[0].shape} .. {mine[-1].shape} | ' + ' | '.join(cells)
                     + ' |')
    if not lines:
        return ''
    head = ['| model | inputs | ' + ' | '.join(label for _, label in _GROWTH) + ' |',
            '|' + '---|' * (2 + len(_GROWTH))]
    return ('Growth exponent in the number of tokens (1 = linear, 2 = quadratic; '
            'all sizes / two largest):\n\n' + '\n'.join(head + lines))


def plot(rows: Sequence[Row], path: Path, title: str = '') -> None:
    """Throughput, forward peak memory and fraction of the matmul peak against
    the input size (megapixels), one line per model, in one PNG."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    panels = [('img_per_s', 'throughput (img/s)'), ('fwd_peak_mib', 'forward peak memory (MiB)'),
              ('fwd_frac_peak', 'forward: fraction of matmul peak')]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.2))
    shapes = sorted({r.shape for r in rows}, key=lambda s: _pixels(s))
    for ax, (key, label) in zip(axes, panels):
        for target in dict.fromkeys(series(r) for r in rows):
            pts = sorted((_pixels(r.shape), getattr(r, key)) for r in rows
                         if series(r) == target and getattr(r, key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker='o', label=target)
        ax.set_xticks([_pixels(s) for s in shapes], shapes, rotation=20)
        if key.endswith('frac_peak'):
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel('input (H x W)')
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if axes[0].lines:
        axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _pixels(shape: str) -> float:
    h, w = shape.split('x')
    return int(h) * int(w) / 1e6


def _worker_main(argv: Sequence[str]) -> None:
    if argv == ['--serve']:
        _serve()
        return
    parser = argparse.ArgumentParser(description='benchmark worker (internal)')
    parser.add_argument('--worker', required=True, help='JSON of a Case')
    parser.add_argument('--parts', nargs='+', choices=('time', 'memory'),
                        default=['time', 'memory'])
    args = parser.parse_args(argv)
    spec = json.loads(args.worker)
    spec['shape'] = tuple(spec['shape'])
    print(json.dumps(measure(Case(**spec), args.parts)))


if __name__ == '__main__':
    _worker_main(sys.argv[1:])

"""Peak memory of a block of code: what the process pays.

On CUDA ``torch.cuda.max_memory_allocated``.  On CPU the process's resident
size and high-water mark (``VmRSS`` / ``VmHWM`` of ``/proc/self/status``,
the mark lowered through ``/proc/self/clear_refs``), read on request in a
process started with :data:`MMAP_MALLOC_ENV`: glibc then serves every block
over 64 KiB with ``mmap`` and unmaps it on ``free``, so both follow the live
tensors.  Such a process is started by the tools (``tools/analysis/``);
nothing here changes the process on import."""
from __future__ import annotations

import os
import resource
from typing import Callable, Optional

#: glibc settings for CPU peak-memory processes: blocks over 64 KiB are
#: mmap-ed and unmapped on free, freed heap memory is returned at once.  They
#: must hold from the start of the process: switched on later, glibc keeps
#: serving big blocks from the free chunks its heap already has, and every
#: page such a block touches stays resident after its free, so the
#: high-water mark would count memory that was freed long before the peak.
MMAP_MALLOC_ENV = {'MALLOC_MMAP_THRESHOLD_': str(64 * 1024), 'MALLOC_TRIM_THRESHOLD_': '0'}


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


def memory_worker_env() -> dict:
    """This process's environment with :data:`MMAP_MALLOC_ENV`, for a
    process that measures CPU peak memory."""
    return {**os.environ, **MMAP_MALLOC_ENV}


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


def _cpu_peak(method: str) -> int:
    if method == 'VmHWM':
        return _proc_status_kib('VmHWM') * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
    lower bound).  Use :func:`memory_worker_env` for the process.
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


def step_peak_bytes(step: Callable[[], None], device: str, module) -> int:
    """The peak memory (bytes) one ``step()`` adds, the gradients of
    ``module`` (a ``torch.nn.Module``) freed first, as a training step's own
    gradients count in its peak."""
    module.zero_grad(set_to_none=True)
    with PeakMemory(device) as peak:
        step()
    return peak.bytes


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

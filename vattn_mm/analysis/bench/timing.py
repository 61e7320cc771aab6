"""The one timing method of every benchmark tool: ``torch.utils.benchmark``
(:class:`torch.utils.benchmark.Timer`, ``blocked_autorange``), which
synchronises the accelerator around each timed block, with this process's
torch threads.  It is imported at the first call: importing it adds
setuptools' vendored packages to the import path."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

_MM_SIZE = 2048
#: ``blocked_autorange`` budget of the matmul peak (seconds)
_MM_MIN_RUN_S = 1.0


@dataclass
class Timing:
    """Per-iteration time of one step over the timed blocks."""

    median_s: float
    #: interquartile range of the blocks' per-iteration times (0 for one block)
    iqr_s: float
    #: timed iterations (the block-size estimates excluded)
    runs: int


def clock() -> float:
    """``torch.utils.benchmark``'s clock: seconds, the accelerator
    synchronised first (for a first iteration timed on its own)."""
    from torch.utils.benchmark.utils.timer import timer
    return timer()


def _timer(step: Callable[[], None]):
    import torch
    from torch.utils.benchmark import Timer
    return Timer('step()', globals={'step': step}, num_threads=torch.get_num_threads())


def time_steps(steps: Mapping[str, Callable[[], None]], iters: int,
               rounds: int = 1) -> dict[str, Timing]:
    """Time each of ``steps`` (name -> step) with ``blocked_autorange``:
    first one block each (``min_run_time=0``: one untimed run estimates the
    block size, then one block, which gives the step's time ``t``), then
    ``rounds`` blocks each with ``min_run_time = (iters - 1) * t / rounds``,
    the order of the steps rotating from block to block, so that a machine
    that speeds up or slows down during the run changes every step alike.
    ``iters=1``: the first block only."""
    if iters < 1 or rounds < 1:
        raise ValueError(f'time_steps needs iters >= 1 and rounds >= 1, got {iters}, {rounds}')
    from torch.utils.benchmark import Measurement
    names = list(steps)
    timers = {name: _timer(steps[name]) for name in names}
    blocks = {name: [timers[name].blocked_autorange(min_run_time=0)] for name in names}
    for i in range(rounds if iters > 1 else 0):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            budget = (iters - 1) * blocks[name][0].median / rounds
            blocks[name].append(timers[name].blocked_autorange(min_run_time=budget))
    out = {}
    for name in names:
        merged, = Measurement.merge(blocks[name])
        out[name] = Timing(merged.median, merged.iqr if len(merged.times) > 1 else 0.,
                           sum(len(m.raw_times) * m.number_per_run for m in blocks[name]))
    return out


def matmul_gflops(device: str, dtype: str = 'fp32') -> float:
    """Best GFLOP/s of ``torch.mm`` on two 2048x2048 matrices (the fastest
    block of a one-second ``blocked_autorange``)."""
    import torch

    from .cases import torch_dtype
    a = torch.randn(_MM_SIZE, _MM_SIZE, device=device, dtype=torch_dtype(dtype))
    b = torch.randn_like(a)
    m = _timer(lambda: torch.mm(a, b)).blocked_autorange(min_run_time=_MM_MIN_RUN_S)
    return 2 * _MM_SIZE ** 3 / min(m.times) / 1e9

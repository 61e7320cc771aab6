"""Latency, throughput, peak memory and fraction of the machine's matmul peak
of a backbone, a token-mixer stage or a whole config: the library behind
``tools/analysis/benchmark.py`` and the other benchmark tools, which start
the worker processes (``tools/analysis/bench_workers.py``).  Two focused
comparisons have their own modules and tools: QuadTree against dense attention
(:mod:`.quadtree_vs_dense`) and DilateFormer's dilated attention against the
official ``nn.Unfold`` form (:mod:`.dilated_vs_unfold`).

Every case (target, input size, mode) is measured in fresh processes so that
peaks do not mix (:mod:`.worker`: which processes, and the protocol of a kept
worker that measures a series of cases, each with its own model):

* the model is built (:mod:`.steps`, under a :mod:`.runtimes` entry), the
  input created and ``warmup`` iterations run;
* time (:mod:`.timing`): ``torch.utils.benchmark``'s ``blocked_autorange``
  with a budget of ``iters`` iterations; reported are the median, the
  interquartile range of the timed blocks and the number of timed
  iterations; the matmul peak is ``torch.mm`` of two 2048x2048 matrices of
  the run's dtype (GFLOP/s of the fastest block);
* peak memory (:mod:`.memory`): what the process pays: on CUDA
  ``torch.cuda.max_memory_allocated``; on CPU in a second process started
  with glibc unmapping freed blocks (:data:`.memory.MMAP_MALLOC_ENV`), whose
  resident size and high-water mark then follow the live tensors.  Reported
  (:func:`.measure.measure`): the memory the process still holds after the
  warm-up above what it held once the model and input were built (the
  gradients freed first, as ``zero_grad`` does), plus one steady
  iteration's own peak; the first iteration's peak beside it.

Modes (:data:`.cases.MODES`): ``fwd`` = eval-mode forward under
``torch.no_grad``; ``train`` = train-mode forward + backward of the sum of
the outputs (no optimizer step); ``train_cp`` = the same step with the
backbone's ``with_cp=True``, timed in alternating blocks with the plain step
(same weights) for the time ratio.  Runtimes: :data:`.runtimes.RUNTIMES`;
dtypes ``fp16`` / ``bf16`` run under autocast, and in ``fwd`` mode a case
other than eager fp32 reports ``max_dev`` from eager fp32.  Reports
(:mod:`.tables`, :mod:`.plot`) give each runtime / dtype's speed against
eager / fp32 of the same model, input and device.

Fraction of peak = ``2 * MACs / latency`` over the matmul GFLOP/s, with the
MACs from :func:`vattn_mm.analysis.spec_complexity`; a training step is taken
as 3x the forward MACs (backward = 2x forward).
"""
from .cases import (DEFAULT_MODES, DTYPES, MODES, TRAIN_MAC_FACTOR, Case, Measurement,
                    device_problem, parse_shape)
from .driver import benchmark, check_choices, write_report
from .measure import measure, profile_case
from .memory import (MMAP_MALLOC_ENV, PeakMemory, memory_worker_env, mmap_malloc_active,
                     peaks_of, resident_bytes, step_peak_bytes)
from .plot import plot
from .tables import (growth_exponent, growth_markdown, markdown, markdown_row, read_csv,
                     report_values, write_csv)
from .rows import Row, fill_row, merge_rows, series
from .runtimes import RUNTIMES, Runtime
from .timing import Timing, matmul_gflops, time_steps

__all__ = [
    'DEFAULT_MODES', 'DTYPES', 'MODES', 'TRAIN_MAC_FACTOR', 'Case', 'Measurement',
    'device_problem', 'parse_shape', 'benchmark', 'check_choices', 'write_report', 'measure',
    'profile_case', 'MMAP_MALLOC_ENV', 'PeakMemory', 'memory_worker_env', 'mmap_malloc_active',
    'peaks_of', 'resident_bytes', 'step_peak_bytes', 'plot', 'growth_exponent',
    'growth_markdown', 'markdown', 'markdown_row', 'read_csv', 'report_values', 'write_csv',
    'Row', 'fill_row', 'merge_rows', 'series', 'RUNTIMES', 'Runtime', 'Timing', 'matmul_gflops',
    'time_steps',
]

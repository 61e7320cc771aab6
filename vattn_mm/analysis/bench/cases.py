"""What a benchmark case is (:class:`Case`) and what measuring it gives
(:class:`Measurement`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MODES = ('fwd', 'train', 'train_cp')
#: what a run measures unless told otherwise
DEFAULT_MODES = ('fwd', 'train')
DTYPES = ('fp32', 'fp16', 'bf16')
#: MACs of a training step relative to the forward
TRAIN_MAC_FACTOR = 3


@dataclass
class Case:
    """One measurement: what to run and how."""

    target: str
    shape: tuple[int, int]
    mode: str = 'fwd'
    device: str = 'cpu'
    dtype: str = 'fp32'
    warmup: int = 2
    #: the timing budget in iterations: ``blocked_autorange`` runs for at
    #: least ``iters`` times one iteration's time (:func:`.timing.time_steps`)
    iters: int = 5
    threads: Optional[int] = None
    #: how the model runs: a :data:`.runtimes.RUNTIMES` name
    runtime: str = 'eager'
    #: ``'module:function'`` building ``target`` instead of
    #: :func:`vattn_mm.analysis.build_target` (e.g. a study's variants:
    #: ``'attention_zoo.variants:build_zoo_target'``), called as
    #: ``fn(target, with_cp=..., device=...)`` and returning a
    #: :class:`vattn_mm.analysis.Target`
    builder: str = ''

    @property
    def label(self) -> str:
        """``'PVTv2:b0 64x64 fwd'``: the case in messages."""
        return f'{self.target} {self.shape[0]}x{self.shape[1]} {self.mode}'


@dataclass
class Measurement:
    """What a worker reports for one :class:`Case`."""

    #: median time of one iteration
    latency_ms: float
    peak_mib: float
    mm_gflops: float
    threads: int
    memory_method: str
    #: 1-minute load average when the timed iterations ended (busy machine?)
    load1: float
    #: interquartile range of the timed blocks' per-iteration times
    latency_iqr_ms: Optional[float] = None
    #: timed iterations (warm-up and block-size estimate excluded)
    runs: Optional[int] = None
    #: ``train_cp`` only: median with_cp step time over the median plain
    #: step time, the two timed in alternating blocks
    cp_time_ratio: Optional[float] = None
    #: compiling runtimes: seconds of the first iteration (compilation + one run)
    compile_s: Optional[float] = None
    #: ``fwd`` of a case other than eager fp32: largest |output - eager fp32
    #: output| over the largest |eager fp32 output|
    max_dev: Optional[float] = None
    #: eager ``fwd``: peak of each of the target's ``parts`` during its own
    #: forward, inside the measured iteration (MiB)
    part_peaks_mib: Optional[dict] = None
    #: what :func:`.measure.measure` reports beside ``peak_mib`` (= held +
    #: step peak): memory kept between iterations, a steady iteration's own
    #: peak, the first iteration's peak (MiB)
    held_mib: Optional[float] = None
    step_peak_mib: Optional[float] = None
    first_peak_mib: Optional[float] = None


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


def torch_dtype(name: str):
    """The torch dtype of a :data:`DTYPES` name."""
    import torch
    return dict(fp32=torch.float32, fp16=torch.float16, bf16=torch.bfloat16)[name]


def device_problem(device: str, dtype: str = 'fp32') -> Optional[str]:
    """Why cases cannot run on ``device`` in ``dtype`` (a CUDA device that is
    not there, or has no bfloat16), as the tools' error; None if they can."""
    if not device.startswith('cuda'):
        return None
    import torch
    if not torch.cuda.is_available():
        return '--device cuda but no CUDA device is available'
    if dtype == 'bf16' and not torch.cuda.is_bf16_supported():
        return '--dtype bf16: this CUDA device has no bf16 support'
    return None

"""Training steps and fast paths on vs off: time and, on CUDA, peak memory;
the verdict of each fast path for its device's default."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional

import torch
from torch import nn

from vattn_mm.backbones import build_backbone
from vattn_mm.ops import Switch, configure
from vattn_mm.utils.compat import grad_scaler
from .golden import GOLDEN_TOL, _within, max_scaled_error
from .precision import _loss
from .report import PASSED, SKIPPED, Check, synchronize

#: a fast path is worth its default where, on vs off, it takes at most FASTER of the
#: time, or keeps at least MEMORY_SAVED less peak memory at most SLOWER_OK of the time
FASTER, MEMORY_SAVED, SLOWER_OK = 0.95, 0.10, 1.05


def time_training_step(model: nn.Module, x: torch.Tensor, amp: bool, steps: int = 3,
                       warmup: int = 1, forward: Optional[Callable[[torch.Tensor], Any]] = None,
                       ) -> dict:
    """AdamW steps on ``sum(out^2).mean()``: the mean step time after ``warmup``
    and, on CUDA, ``torch.cuda.max_memory_allocated``.  AMP: float16 with a
    GradScaler on CUDA, bfloat16 on the CPU.  ``forward``: how to run
    ``model`` (default: call it)."""
    forward = forward or model
    device = x.device
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = grad_scaler(device.type, enabled=amp and dtype == torch.float16)
    model.train()
    losses = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            loss = _loss(forward(x))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())

    seconds, peak, _ = _timed(step, device, steps, warmup)
    if not all(torch.isfinite(loss) for loss in losses):
        raise AssertionError(f'non-finite loss: {[loss.item() for loss in losses]}')
    metrics = {'step ms': round(seconds * 1e3, 1), 'loss': losses[-1].item()}
    if peak is not None:
        metrics['peak MiB'] = round(peak)
    return metrics


def _timed(step: Callable[[], Any], device: torch.device, steps: int,
           warmup: int) -> tuple[float, Optional[float], Any]:
    """Mean seconds of ``steps`` calls of ``step`` after ``warmup`` untimed
    ones, the peak memory of the timed calls on CUDA (MiB; ``None``
    elsewhere) and the last call's result."""
    for _ in range(warmup):
        step()
    synchronize(device)
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(steps):
        result = step()
    synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    peak = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == 'cuda' else None)
    return seconds, peak, result


def training_row(build: Callable[[], tuple], device: torch.device, hw: tuple, amp: bool,
                  quick: bool) -> dict:
    """:func:`time_training_step` of ``build() -> (module, forward)`` (seeded)
    on a batch of 2 (quick: 1) images of size ``hw``; the device's cache is
    emptied after."""
    torch.manual_seed(0)
    model, forward = build()
    x = torch.randn(1 if quick else 2, 3, *hw, device=device)
    try:
        return time_training_step(model, x, amp, steps=1 if quick else 3, forward=forward)
    finally:
        del model, forward
        if device.type == 'cuda':
            torch.cuda.empty_cache()


def fast_path_holders(archs: dict) -> dict:
    """``{path name: (family, arch)}``: for every registered fast path the
    first of ``archs`` whose backbone has a layer switching it (built on the
    meta device: no weights are made)."""
    holders = {}
    for family, arch in archs.items():
        with torch.device('meta'):
            model = build_backbone(family, arch)
        names = {v.name for m in model.modules() for v in vars(m).values()
                 if isinstance(v, Switch)}
        for name in sorted(names - set(holders)):
            holders[name] = (family, arch)
    return holders


def _measure(model: nn.Module, x: torch.Tensor, mode: str, amp: bool, steps: int,
             warmup: int) -> tuple[float, Optional[float], torch.Tensor]:
    """Mean seconds of ``steps`` forward (+ backward in ``'train'``) passes
    after ``warmup``, the peak memory of those steps on CUDA (MiB) and the
    first output of the last pass."""
    device = x.device
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    model.train(mode == 'train')

    def step():
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(mode == 'train'), \
                torch.autocast(device.type, dtype=dtype, enabled=amp):
            outs = model(x)
        if mode == 'train':
            _loss(outs).backward()
        return outs[0].detach()

    return _timed(step, device, steps, warmup)


def fast_path_verdict(time_ratio: float, memory_ratio: Optional[float]) -> str:
    """``'on'`` where the path wins (:data:`FASTER`, or :data:`MEMORY_SAVED`
    at :data:`SLOWER_OK`), else ``'off'``; ratios are on / off."""
    if time_ratio <= FASTER:
        return 'on'
    if memory_ratio is not None and memory_ratio <= 1 - MEMORY_SAVED and time_ratio <= SLOWER_OK:
        return 'on'
    return 'off'


def compare_fast_path(model: nn.Module, name: str, x: torch.Tensor, mode: str, amp: bool,
                      steps: int = 3, warmup: int = 1, rounds: int = 2) -> dict:
    """Path ``name`` on vs off in ``model`` (every other path at its
    default), alternating ``rounds`` times, the faster round of each kept:
    time, peak memory (CUDA), the float32 outputs' agreement and the verdict."""
    results = {True: [], False: []}
    for _ in range(rounds):
        for on in (True, False):
            configure(model, {name: on})
            results[on].append(_measure(model, x, mode, amp, steps, warmup))
    configure(model, None)
    (t_on, m_on, out_on), (t_off, m_off, out_off) = (min(results[k], key=lambda r: r[0])
                                                     for k in (True, False))
    metrics = {'on ms': round(t_on * 1e3, 2), 'off ms': round(t_off * 1e3, 2),
               'time on/off': round(t_on / t_off, 3)}
    memory_ratio = None
    if m_on is not None:
        memory_ratio = m_on / m_off
        metrics.update({'on MiB': round(m_on), 'off MiB': round(m_off),
                        'memory on/off': round(memory_ratio, 3)})
    if not amp:
        err = max_scaled_error([out_on], [out_off.float().cpu()])
        metrics.update(_within(err, GOLDEN_TOL, 'on vs off'))
    metrics['verdict'] = fast_path_verdict(t_on / t_off, memory_ratio)
    return metrics


def implied_defaults(checks: Iterable[Check]) -> dict:
    """``{path: 'on' | 'off' | 'no data'}`` from the fast-path section's
    checks (named ``'<path> <mode> <size> <precision>'``): ``'on'`` only where
    every measured row of the path says so and none failed."""
    rows: dict = {}
    for check in checks:
        rows.setdefault(check.name.split(' ')[0], []).append(check)
    out = {}
    for name, group in rows.items():
        measured = [c for c in group if c.status != SKIPPED]
        if not measured:
            out[name] = 'no data'
        elif all(c.status == PASSED and c.metrics.get('verdict') == 'on' for c in measured):
            out[name] = 'on'
        else:
            out[name] = 'off'
    return out

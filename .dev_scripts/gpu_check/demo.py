"""The demo Mask R-CNN's losses on the device against the CPU's."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

#: total loss of the demo Mask R-CNN's first iterations on the CPU (the suite's demo
#: data: 8 training images of 128 x 128, batch 2, seed 0): 4.17 and 3.98 in iterations 1, 2
CPU_DEMO_LOSS = 4.1


def read_losses(work_dir: Path) -> list[float]:
    """The ``loss`` of every logged training iteration of an mmengine run in ``work_dir``."""
    files = sorted(Path(work_dir).glob('*/vis_data/scalars.json'))
    if not files:
        raise FileNotFoundError(f'no */vis_data/scalars.json under {work_dir}')
    losses = []
    for line in files[-1].read_text().splitlines():
        entry = json.loads(line)
        if 'loss' in entry and 'iter' in entry:       # not the validation entries
            losses.append(float(entry['loss']))
    if not losses:
        raise ValueError(f'{files[-1]} holds no training loss')
    return losses


def demo_loss_verdict(losses: Sequence[float], reference: float = CPU_DEMO_LOSS) -> dict:
    """Finite losses whose first iterations are within 2x of the CPU reference
    and, over 20 or more iterations, fall."""
    if not all(math.isfinite(v) for v in losses):
        raise AssertionError(f'non-finite demo loss: {list(losses)}')
    first = sum(losses[:5]) / len(losses[:5])
    if not reference / 2 <= first <= reference * 2:
        raise AssertionError(f'first losses average {first:.3g}, CPU reference {reference} '
                             '(more than 2x apart)')
    metrics = {'iterations': len(losses), 'first loss': first, 'last loss': losses[-1]}
    if len(losses) >= 20:
        last = sum(losses[-10:]) / 10
        if not last < first:
            raise AssertionError(f'loss did not fall: first {first:.3g}, last 10 {last:.3g}')
        metrics['last 10 mean'] = last
    return metrics

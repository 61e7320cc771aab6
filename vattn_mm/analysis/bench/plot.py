"""The benchmark's figure: throughput, forward peak memory and fraction of
the matmul peak against the input size."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .rows import Row, pixels, series


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
    shapes = sorted({r.shape for r in rows}, key=pixels)
    for ax, (key, label) in zip(axes, panels):
        for target in dict.fromkeys(series(r) for r in rows):
            pts = sorted((pixels(r.shape), getattr(r, key)) for r in rows
                         if series(r) == target and getattr(r, key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker='o', label=target)
        ax.set_xticks([pixels(s) for s in shapes], shapes, rotation=20)
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

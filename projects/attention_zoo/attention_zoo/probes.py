"""The zoo's probes: procedurally generated dense tasks, each isolating one
property of a design (projects/attention_zoo/README.md, "Probes").  Every probe draws images
[N, 3, H, W] (float32) and per-pixel labels [N, H, W] (int64, 0 =
background) from a seed, at any side, so a study ships no data.

* ``resolution``: filled discs, squares and triangles of a fixed pixel size
  (radius 5-10) at a constant density; trained at one side, evaluated at 1x,
  ~2x and 4x the pixels (what a position encoding does on a new grid).
* ``long_range``: grey discs whose class is the colour of a cue band along
  the image's opposite edge, at least :data:`LONG_RANGE_GAP` pixels away (a
  mixer that sees no further cannot know it).
* ``scale_range``: a grey bar from 4 pixels to 90 % of the side long
  (uniform in length, so long bars carry their share of the pixels),
  labelled by the colour of one end (a short bar's mark is a few pixels and
  needs resolution, a long one's other end lies most of the image away).
* ``fine_structure``: an arc 1.5-3 pixels wide over clutter, grey but for
  its start, whose colour names the class: thin pixels decide the IoU and
  the class must travel along the thin curve.

Each has a variant (:func:`variants_of`) with another geometry (distance,
side or object size) or schedule, whose runs test whether the base probe's
claims survive the change.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np

#: the smallest distance (pixels) from the long-range cue band to an object pixel
LONG_RANGE_GAP = 64
#: the width (pixels) of the long-range probe's cue band
CUE_BAND = 8
#: the scale-range and fine-structure probes' classes: the first cue colours
SCALE_CLASSES = FINE_CLASSES = 3
#: a scale-range bar's length over its width
BAR_ASPECT = 4
#: the fraction of a scale-range bar's length (from one end) in its class's colour
MARK_LENGTH = 0.2
#: the fraction of the fine-structure arc (from its start) in its class's colour
ARC_MARK = 0.3
#: the cue colours of the long-range probe (class 1 + index)
CUE_COLOURS = np.array([[1.0, 0.1, 0.1], [0.1, 1.0, 0.1], [0.1, 0.2, 1.0], [1.0, 1.0, 0.1]],
                       np.float32)
SHAPES = ('disc', 'square', 'triangle')
SPLITS = ('train', 'eval')


@dataclass(frozen=True)
class Probe:
    """One probe: its generator, classes and sizes.  ``eval_sides``: the
    sides it is evaluated at (the first is the training side's score);
    ``schedule``: its training steps as a multiple of the study's;
    ``varies``: the base probe of a variant (same cue and labels, another
    geometry or schedule), whose claims it tests."""

    name: str
    classes: tuple[str, ...]
    draw: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
    train_side: int
    eval_sides: tuple[int, ...]
    summary: str
    schedule: float = 1.
    #: the probe whose question this one asks again under another geometry
    #: or schedule ('' for a base probe)
    varies: str = ''

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def sample(self, seed: int, n: int, side: int | None = None, split: str = 'train'
               ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` images and labels of side ``side`` (default the training
        side), the same for the same ``(seed, n, side, split)``; the
        ``'train'`` and ``'eval'`` streams never share a draw."""
        side = side or self.train_side
        if side < 32:
            raise ValueError(f'probe {self.name}: side {side} is below 32 pixels')
        if split not in SPLITS or seed < 0:
            raise ValueError(f'probe {self.name}: split must be one of {SPLITS} and seed >= 0, '
                             f'got {split!r}, {seed}')
        rng = np.random.default_rng([SPLITS.index(split), seed, side])
        pairs = [self.draw(rng, side) for _ in range(n)]
        return (np.stack([p[0] for p in pairs]).astype(np.float32),
                np.stack([p[1] for p in pairs]).astype(np.int64))


# ------------------------------------------------------------------ drawing
@functools.lru_cache(maxsize=8)
def _grid(side: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates (x, y), [side, side] each, read-only (shared
    by every image of that side)."""
    ys, xs = np.mgrid[0:side, 0:side].astype(np.float32)
    xs, ys = xs + 0.5, ys + 0.5
    xs.flags.writeable = ys.flags.writeable = False
    return xs, ys


def _background(rng: np.random.Generator, side: int) -> np.ndarray:
    """Noise over a random colour gradient, [3, side, side]."""
    xs, ys = _grid(side)
    base = rng.uniform(0.1, 0.4, (3, 1, 1)).astype(np.float32)
    slope = rng.uniform(-0.2, 0.2, (3, 2, 1, 1)).astype(np.float32)
    ramp = base + (slope[:, 0] * xs + slope[:, 1] * ys) / side
    return ramp + rng.normal(0, 0.05, (3, side, side)).astype(np.float32)


def shape_mask(kind: str, xs: np.ndarray, ys: np.ndarray, cx: float, cy: float,
               radius: float, angle: float) -> np.ndarray:
    """Pixels of a filled shape of circumradius ``radius`` (a square's half
    diagonal), rotated by ``angle``."""
    u, v = xs - cx, ys - cy
    if kind == 'disc':
        return u * u + v * v <= radius * radius
    c, s = math.cos(angle), math.sin(angle)
    ur, vr = c * u + s * v, -s * u + c * v
    if kind == 'square':
        half = radius / math.sqrt(2)
        return (np.abs(ur) <= half) & (np.abs(vr) <= half)
    if kind == 'triangle':          # inradius radius / 2: three half-planes
        inside = np.ones_like(u, dtype=bool)
        for k in range(3):
            t = 2 * math.pi * k / 3
            inside &= math.cos(t) * ur + math.sin(t) * vr <= radius / 2
        return inside
    raise ValueError(f'unknown shape {kind!r}; choose from {SHAPES}')


def _paint(image: np.ndarray, label: np.ndarray, mask: np.ndarray, colour: np.ndarray,
           cls: int) -> None:
    image[:, mask] = colour[:, None]
    label[mask] = cls


def _shapes(rng: np.random.Generator, side: int, radii: Sequence[float],
            margin: float = 0.) -> tuple[np.ndarray, np.ndarray]:
    """Shapes of random class and colour with the given radii (largest first,
    so small ones stay visible), centres at least ``margin`` of the radius
    inside the image."""
    xs, ys = _grid(side)
    image, label = _background(rng, side), np.zeros((side, side), np.int64)
    for radius in sorted(radii, reverse=True):
        lo, hi = margin * radius, side - margin * radius
        cx, cy = rng.uniform(lo, hi, 2)
        kind = int(rng.integers(len(SHAPES)))
        mask = shape_mask(SHAPES[kind], xs, ys, cx, cy, radius, rng.uniform(0, 2 * math.pi))
        _paint(image, label, mask, rng.uniform(0.45, 1.0, 3).astype(np.float32), 1 + kind)
    return image, label


def draw_resolution(rng: np.random.Generator, side: int, radii: tuple[float, float] = (5, 10),
                    per_64px: float = 3) -> tuple[np.ndarray, np.ndarray]:
    """Shapes of circumradius uniform in ``radii``, ``per_64px`` of them
    (+-30 %) per 64 x 64 pixels."""
    count = max(1, round(per_64px * side * side / 64 ** 2 * rng.uniform(0.7, 1.3)))
    return _shapes(rng, side, rng.uniform(*radii, count), margin=0.5)


def draw_scale_range(rng: np.random.Generator, side: int) -> tuple[np.ndarray, np.ndarray]:
    """One grey bar in a random direction, its length uniform from 4 px to
    90 % of the side, :data:`BAR_ASPECT` times its width (at least 2 px),
    labelled 1 + the colour index of its mark: the first
    :data:`MARK_LENGTH` of its length (at least 1.5 px)."""
    xs, ys = _grid(side)
    image, label = _background(rng, side), np.zeros((side, side), np.int64)
    length = rng.uniform(4, 0.9 * side)
    width = max(2., length / BAR_ASPECT)
    angle = rng.uniform(0, 2 * math.pi)
    c, s = math.cos(angle), math.sin(angle)
    half_x = (abs(c) * length + abs(s) * width) / 2 + 1        # the bar's bounding box
    half_y = (abs(s) * length + abs(c) * width) / 2 + 1
    cx, cy = rng.uniform(half_x, side - half_x), rng.uniform(half_y, side - half_y)
    along = (xs - cx) * c + (ys - cy) * s
    across = (ys - cy) * c - (xs - cx) * s
    bar = (np.abs(along) <= length / 2) & (np.abs(across) <= width / 2)
    cls = int(rng.integers(SCALE_CLASSES))
    _paint(image, label, bar, np.full(3, rng.uniform(0.5, 0.75), np.float32), 1 + cls)
    mark = bar & (along <= max(1.5, MARK_LENGTH * length) - length / 2)
    image[:, mark] = CUE_COLOURS[cls][:, None]
    return image, label


def draw_long_range(rng: np.random.Generator, side: int, gap: int = LONG_RANGE_GAP
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A cue band of :data:`CUE_BAND` pixels along the left or right edge;
    2-4 grey discs at least ``gap`` pixels from it, labelled 1 + the band's
    colour index."""
    max_radius = 10
    near, far = CUE_BAND + gap, side - 2
    if far - near < 2 * max_radius:
        raise ValueError(f'long_range needs a side of at least {near + 2 * max_radius + 2}, '
                         f'got {side}')
    xs, ys = _grid(side)
    image, label = _background(rng, side), np.zeros((side, side), np.int64)
    cue = int(rng.integers(len(CUE_COLOURS)))
    left = bool(rng.integers(2))
    band = slice(0, CUE_BAND) if left else slice(side - CUE_BAND, side)
    image[:, :, band] = CUE_COLOURS[cue][:, None, None]
    for _ in range(int(rng.integers(2, 5))):
        radius = rng.uniform(5, max_radius)
        cx = rng.uniform(near + radius, far - radius)
        cx = cx if left else side - cx
        cy = rng.uniform(radius, side - radius)
        mask = (xs - cx) ** 2 + (ys - cy) ** 2 <= radius * radius
        _paint(image, label, mask, np.full(3, rng.uniform(0.55, 0.75), np.float32), 1 + cue)
    return image, label


def draw_fine_structure(rng: np.random.Generator, side: int,
                        widths: tuple[float, float] = (1.5, 3.0)) -> tuple[np.ndarray, np.ndarray]:
    """Clutter blobs, then one open arc ``widths`` pixels wide: 60-85 % of an
    ellipse with semi-axes 25-45 % of the side, grey but for its first
    :data:`ARC_MARK` of the arc's length, which is in the colour of its
    class (3).  The label is the thin curve: its pixels far along the arc
    must see the mark through the curve's few pixels."""
    xs, ys = _grid(side)
    image, label = _background(rng, side), np.zeros((side, side), np.int64)
    for _ in range(int(rng.integers(2, 5))):            # clutter: soft blobs, label 0
        cx, cy = rng.uniform(0, side, 2)
        blob = np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * rng.uniform(3, 8) ** 2))
        image += blob[None] * rng.uniform(0.2, 0.5, (3, 1, 1)).astype(np.float32)
    a, b = rng.uniform(0.25, 0.45, 2) * side
    cx, cy = rng.uniform(max(a, b) + 2, side - max(a, b) - 2, 2)
    angle = rng.uniform(0, 2 * math.pi)
    c, s = math.cos(angle), math.sin(angle)
    u, v = xs - cx, ys - cy
    ur, vr = (c * u + s * v) / a, (-s * u + c * v) / b
    width = rng.uniform(*widths)
    curve = np.abs(np.sqrt(ur * ur + vr * vr) - 1) * math.sqrt(a * b) <= width / 2
    start, span = rng.uniform(0, 2 * math.pi), rng.uniform(0.6, 0.85) * 2 * math.pi
    along = np.mod(np.arctan2(vr, ur) - start, 2 * math.pi)
    curve &= along <= span
    cls = int(rng.integers(FINE_CLASSES))
    _paint(image, label, curve, np.full(3, rng.uniform(0.6, 0.9), np.float32), 1 + cls)
    image[:, curve & (along <= ARC_MARK * span)] = CUE_COLOURS[cls][:, None]
    return image, label


RESOLUTION = Probe('resolution', ('background',) + SHAPES, draw_resolution, 64, (64, 88, 128),
                   'shapes of a fixed pixel size; trained at 64, tested at 64, 88 and 128 px')
LONG_RANGE = Probe('long_range', ('background', 'red cue', 'green cue', 'blue cue', 'yellow cue'),
                   draw_long_range, 112, (112,),
                   f'grey discs take the colour class of an edge band >= {LONG_RANGE_GAP} px away')
SCALE_RANGE = Probe('scale_range', ('background', 'red mark', 'green mark', 'blue mark'),
                    draw_scale_range, 128, (128,),
                    f'a grey bar 4 px to 90 % of the side long, classed by the colour of its '
                    f'first {MARK_LENGTH * 100:.0f} %', schedule=1.5)
FINE_STRUCTURE = Probe('fine_structure', ('background', 'red start', 'green start', 'blue start'),
                       draw_fine_structure, 96, (96,),
                       f'an arc 1.5-3 px wide over clutter, classed by the colour of its first '
                       f'{ARC_MARK * 100:.0f} %')


def variant(base: Probe, name: str, summary: str, draw: Optional[Callable] = None,
            **changes) -> Probe:
    """A probe asking ``base``'s question again: its drawing (``draw``,
    e.g. ``base.draw`` with other settings), sides or schedule changed."""
    return replace(base, name=f'{base.name}_{name}', draw=draw or base.draw, summary=summary,
                   varies=base.name, **changes)


LONG_RANGE_FAR = variant(LONG_RANGE, 'far', 'the cue band >= 80 px away, 128 px images',
                         functools.partial(draw_long_range, gap=80), train_side=128,
                         eval_sides=(128,))

PROBES: dict[str, Probe] = {p.name: p for p in (
    RESOLUTION, LONG_RANGE, SCALE_RANGE, FINE_STRUCTURE,
    variant(RESOLUTION, 'small', 'shapes of radius 3-6 px (8 per 64² px); trained at 64, tested at '
            '64, 88 and 128 px', functools.partial(draw_resolution, radii=(3, 6), per_64px=8)),
    variant(RESOLUTION, 'large', 'shapes of radius 8-16 px (1.2 per 64² px); trained at 64, tested '
            'at 64, 88 and 128 px', functools.partial(draw_resolution, radii=(8, 16), per_64px=1.2)),
    LONG_RANGE_FAR,
    variant(LONG_RANGE, 'long', f'the cue band >= {LONG_RANGE_GAP} px away, twice the steps',
            schedule=2.),
    replace(LONG_RANGE_FAR, name='long_range_far_long', schedule=2.,
            summary=LONG_RANGE_FAR.summary + ', twice the steps'),
    variant(SCALE_RANGE, 'large', 'a bar 4 px to 90 % of 160 px long (reach up to ~115 px)',
            train_side=160, eval_sides=(160,)),
    variant(FINE_STRUCTURE, 'thin', 'an arc 1-2 px wide over clutter',
            functools.partial(draw_fine_structure, widths=(1.0, 2.0))),
)}


def variants_of(name: str) -> list[str]:
    """The variants of base probe ``name`` (their names)."""
    return [p.name for p in PROBES.values() if p.varies == name]


def get_probe(name: str) -> Probe:
    if name not in PROBES:
        raise ValueError(f'unknown probe {name!r}; choose from {list(PROBES)}')
    return PROBES[name]


# ------------------------------------------------------------------ metric
def confusion(pred: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    """[num_classes, num_classes] counts, rows the truth."""
    if pred.shape != label.shape:
        raise ValueError(f'prediction {pred.shape} and label {label.shape} differ in shape')
    idx = label.astype(np.int64).ravel() * num_classes + pred.astype(np.int64).ravel()
    return np.bincount(idx, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def mean_iou(conf: np.ndarray) -> float:
    """Mean IoU over the classes present in the truth or the prediction."""
    tp = np.diag(conf).astype(np.float64)
    union = conf.sum(0) + conf.sum(1) - tp
    present = union > 0
    return float((tp[present] / union[present]).mean())


def trivial_miou(labels: np.ndarray, num_classes: int) -> float:
    """The score of the trivial solution: every pixel the most frequent class."""
    counts = np.bincount(labels.ravel(), minlength=num_classes)
    return mean_iou(confusion(np.full_like(labels, counts.argmax()), labels, num_classes))

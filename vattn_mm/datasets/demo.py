"""A small deterministic dataset of textured shapes, written in COCO instance
format and in ADE20K-style semantic format, so that detection, instance and
semantic segmentation pipelines run end to end without downloads.

Layout under ``root``::

    coco/train/*.jpg  coco/val/*.jpg  coco/annotations/instances_{train,val}.json
    ade/images/{training,validation}/*.jpg
    ade/annotations/{training,validation}/*.png   (0 = background, k = class k)
    cls/{train,val}/<class>/*.png                  (object crops, ImageNet layout)
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import cv2
import numpy as np

CLASSES = ('circle', 'triangle', 'square', 'star')
PALETTE = [(220, 20, 60), (0, 130, 200), (60, 180, 75), (255, 200, 0)]
SEG_CLASSES = ('background', ) + CLASSES
SEG_PALETTE = [(0, 0, 0)] + PALETTE


def _polygon(kind: str, cx: float, cy: float, r: float, angle: float) -> np.ndarray:
    if kind == 'circle':
        n, radii = 32, [r] * 32
    elif kind == 'triangle':
        n, radii = 3, [r] * 3
    elif kind == 'square':
        n, radii = 4, [r] * 4
    else:  # five-pointed star
        n, radii = 10, [r if i % 2 == 0 else 0.45 * r for i in range(10)]
    t = angle + np.arange(n) * 2 * math.pi / n
    return np.stack([cx + np.array(radii) * np.cos(t), cy + np.array(radii) * np.sin(t)], 1)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Smooth colour gradient + stripes + noise: texture that is not an object."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    base = rng.uniform(60, 190, 3)
    grad = rng.uniform(-50, 50, (2, 3))
    freq, phase = rng.uniform(4, 14), rng.uniform(0, 2 * math.pi)
    theta = rng.uniform(0, math.pi)
    stripes = 18 * np.sin(2 * math.pi * freq * (xx * math.cos(theta) + yy * math.sin(theta)) + phase)
    img = base + xx[..., None] * grad[0] + yy[..., None] * grad[1] + stripes[..., None]
    img += rng.normal(0, 8, (size, size, 3))
    return img


def _scene(rng: np.random.Generator, size: int, max_objects: int):
    img = _background(rng, size)
    label = np.zeros((size, size), np.uint8)
    objects = []
    for _ in range(rng.integers(1, max_objects + 1)):
        cls = int(rng.integers(len(CLASSES)))
        r = rng.uniform(0.08, 0.2) * size
        cx, cy = rng.uniform(r, size - r, 2)
        poly = _polygon(CLASSES[cls], cx, cy, r, rng.uniform(0, 2 * math.pi))
        mask = np.zeros((size, size), np.uint8)
        cv2.fillPoly(mask, [np.round(poly).astype(np.int32)], 1)
        colour = np.array(PALETTE[cls], np.float32) * rng.uniform(0.75, 1.1)
        texture = rng.normal(0, 12, (size, size, 1))
        img = np.where(mask[..., None] > 0, colour + texture, img)
        # later objects occlude earlier ones
        for obj in objects:
            obj['mask'] &= ~mask.astype(bool)
        label[mask > 0] = cls + 1
        objects.append(dict(cls=cls, mask=mask.astype(bool)))
    objects = [o for o in objects if o['mask'].sum() >= 64]
    return np.clip(img, 0, 255).astype(np.uint8), label, objects


def demo_image(rng: np.random.Generator, size: int, max_objects: int = 4) -> np.ndarray:
    """One ``size x size x 3`` uint8 scene of the demo set (textured background,
    1 to ``max_objects`` shapes), drawn from ``rng``."""
    return _scene(rng, size, max_objects)[0]


def _coco_annotation(obj: dict, ann_id: int, image_id: int) -> dict:
    contours, _ = cv2.findContours(obj['mask'].astype(np.uint8), cv2.RETR_EXTERNAL,
                                   cv2.CHAIN_APPROX_SIMPLE)
    polys = [c.reshape(-1).astype(float).tolist() for c in contours if len(c) >= 3]
    ys, xs = np.nonzero(obj['mask'])
    x0, y0 = float(xs.min()), float(ys.min())
    return dict(id=ann_id, image_id=image_id, category_id=obj['cls'] + 1,
                segmentation=polys, area=float(obj['mask'].sum()),
                bbox=[x0, y0, float(xs.max()) - x0 + 1, float(ys.max()) - y0 + 1],
                iscrowd=0)


def make_demo_dataset(root: str | Path, num_train: int = 96, num_val: int = 24,
                      size: int = 256, max_objects: int = 4, seed: int = 0,
                      splits: Sequence[str] = ('train', 'val')) -> Path:
    """Write the demo dataset under ``root`` (deterministic for a seed)."""
    root = Path(root)
    counts = dict(train=num_train, val=num_val)
    ade_split = dict(train='training', val='validation')
    for split in splits:
        rng = np.random.default_rng([seed, 0 if split == 'train' else 1])
        for d in (root / 'coco' / split, root / 'coco' / 'annotations',
                  root / 'ade' / 'images' / ade_split[split],
                  root / 'ade' / 'annotations' / ade_split[split]):
            d.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i in range(counts[split]):
            img, label, objects = _scene(rng, size, max_objects)
            name = f'{split}_{i:04d}'
            bgr = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
            cv2.imwrite(str(root / 'coco' / split / f'{name}.jpg'), bgr)
            cv2.imwrite(str(root / 'ade' / 'images' / ade_split[split] / f'{name}.jpg'), bgr)
            cv2.imwrite(str(root / 'ade' / 'annotations' / ade_split[split] / f'{name}.png'), label)
            images.append(dict(id=i + 1, file_name=f'{name}.jpg', height=size, width=size))
            for obj in objects:
                annotations.append(_coco_annotation(obj, len(annotations) + 1, i + 1))
                _write_crop(root / 'cls' / split, name, len(annotations), img, obj)
        coco = dict(images=images, annotations=annotations,
                    categories=[dict(id=k + 1, name=c) for k, c in enumerate(CLASSES)])
        with open(root / 'coco' / 'annotations' / f'instances_{split}.json', 'w') as f:
            json.dump(coco, f)
    return root


def _write_crop(directory: Path, name: str, ann_id: int, img: np.ndarray, obj: dict) -> None:
    """Square crop around an object, for the classification demo."""
    ys, xs = np.nonzero(obj['mask'])
    cy, cx = (ys.min() + ys.max()) / 2, (xs.min() + xs.max()) / 2
    half = int(max(ys.max() - ys.min(), xs.max() - xs.min()) * 0.6) + 4
    y0, x0 = int(max(cy - half, 0)), int(max(cx - half, 0))
    crop = img[y0:int(cy + half), x0:int(cx + half)]
    out = directory / CLASSES[obj['cls']]
    out.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out / f'{name}_{ann_id}.png'), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))

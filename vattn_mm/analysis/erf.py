"""Effective receptive fields (Luo et al., NeurIPS 2016, arXiv:1701.04128),
measured as RepLKNet does (Ding et al., CVPR 2022, arXiv:2203.06717).

Per image, the backbone (eval mode, float32, frozen parameters) runs up to the
chosen stage; the ReLU of that stage's output at its central location, summed
over the channels, is differentiated with respect to the input; the gradient's
ReLU (or absolute value) summed over the input channels is the image's
contribution map, averaged over the images.  For display and for the
high-contribution area ratio the map becomes ``log10(x + 1)`` scaled to a
maximum of 1; the area ratio for a threshold ``t`` is the area of the smallest
square around the centre (side ``2i + 1``, clipped to the image) that holds
more than ``t`` of that map's total, as a fraction of the input area.
"""
from __future__ import annotations

import io
import json
import math
import os.path as osp
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import MODELS, DefaultScope
from torch import nn

from ..backbones import PyramidBackbone
from ..backbones.keymap import KeyMap
from ..backbones.loading import FamilyConverter, load_pretrained
from ..datasets import demo_image
from ..engine.distributed import replace_sync_bn
from .model_spec import build_spec, is_backbone_spec, strip_pretrained

#: RepLKNet's thresholds of the high-contribution area ratio
THRESHOLDS = (0.2, 0.3, 0.5, 0.99)
#: what becomes of the input gradient: RepLKNet's ReLU, or its magnitude
GRADIENTS = ('relu', 'abs')
#: ImageNet mean and std of 0-255 RGB images (the configs' data preprocessors)
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.webp')


@dataclass(frozen=True)
class Preprocess:
    """0-255 RGB images -> the backbone's input, as the config's data
    preprocessor makes it: BGR where the model reads BGR (no
    ``bgr_to_rgb`` / ``to_rgb``), then ``(x - mean) / std``."""

    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    rgb: bool = True

    @classmethod
    def from_config(cls, data_preprocessor: Optional[Mapping]) -> 'Preprocess':
        if not data_preprocessor or 'mean' not in data_preprocessor:
            return cls()
        rgb = bool(data_preprocessor.get('bgr_to_rgb', data_preprocessor.get('to_rgb', False)))
        return cls(tuple(data_preprocessor['mean']), tuple(data_preprocessor['std']), rgb)

    def __call__(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """``N`` images ``H x W x 3`` (uint8 RGB) -> ``(N, 3, H, W)`` float32."""
        x = torch.from_numpy(np.stack(images)).float().permute(0, 3, 1, 2)
        if not self.rgb:
            x = x.flip(1)
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return (x - mean) / std


@dataclass
class ErfModel:
    """A backbone to measure, how its input is made and where its weights come
    from (``'random init'`` or the checkpoint)."""

    name: str
    backbone: nn.Module
    preprocess: Preprocess
    weights: str


@dataclass(frozen=True)
class AreaRatio:
    """The smallest centred square holding more than ``threshold`` of the
    contribution: its side (before clipping to the image) and its area as a
    fraction of the input's."""

    threshold: float
    side: int
    ratio: float


@dataclass
class Erf:
    """An effective receptive field: ``contribution`` (``H x W``) is the mean
    over ``num_images`` images of the per-image contribution maps."""

    name: str
    stage: int
    contribution: np.ndarray
    num_images: int
    gradient: str = 'relu'

    @property
    def display(self) -> np.ndarray:
        return display_map(self.contribution)

    def area_ratios(self, thresholds: Sequence[float] = THRESHOLDS) -> list[AreaRatio]:
        return area_ratios(self.display, thresholds)

    @property
    def centroid(self) -> tuple[float, float]:
        """(row, column) of the contribution's centre of mass: where the
        field is centred, which the area ratio assumes to be ``(H // 2, W // 2)``
        (with overlapping, padded embeddings output ``i`` of a stride-``s``
        stage is centred on pixel ``s * i``)."""
        rows, cols = self.contribution.sum(1), self.contribution.sum(0)
        return (float(rows @ np.arange(rows.size) / rows.sum()),
                float(cols @ np.arange(cols.size) / cols.sum()))


# ------------------------------------------------------------------ models
def load_weights(backbone: nn.Module, checkpoint: str) -> None:
    """Load ``checkpoint`` (a file or URL; a whole detector / segmentor /
    classifier file or a backbone's, official or vattn-mm keys) strictly into
    ``backbone`` with the project's safe loader."""
    converter = (backbone.checkpoint_converter() if isinstance(backbone, PyramidBackbone)
                 else FamilyConverter(type(backbone).__name__.lower(), KeyMap(())))
    load_pretrained(backbone, checkpoint, converter)


def _finish(name: str, backbone: nn.Module, preprocess: Preprocess,
            checkpoint: Optional[str]) -> ErfModel:
    if checkpoint is None:
        backbone.init_weights()
        return ErfModel(name, backbone, preprocess, 'random init')
    load_weights(backbone, checkpoint)
    return ErfModel(name, backbone, preprocess, checkpoint)


def config_model(path: str, checkpoint: Optional[str] = None) -> ErfModel:
    """The backbone of a config file: ``model.backbone`` of a detection,
    segmentation or classification config, or a bare ``backbone = dict(...)``
    (``configs/_base_/backbones/``), built in the config's scope without its
    ``Pretrained`` init (random init unless ``checkpoint``); the input as the
    config's ``model.data_preprocessor`` makes it (ImageNet's by default)."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'config file not found: {path}')
    cfg = Config.fromfile(path)
    model = cfg.get('model') or {}
    backbone_cfg = model.get('backbone') if isinstance(model, Mapping) else None
    backbone_cfg = backbone_cfg or cfg.get('backbone')
    if not isinstance(backbone_cfg, Mapping) or 'type' not in backbone_cfg:
        raise ValueError(f'{path} has no backbone: neither `model.backbone` nor `backbone` '
                         'is a module config')
    backbone_cfg = strip_pretrained(ConfigDict(backbone_cfg).to_dict())
    replace_sync_bn(backbone_cfg)
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmdet')):
        backbone = MODELS.build(backbone_cfg)
    preprocess = Preprocess.from_config(model.get('data_preprocessor')
                                        if isinstance(model, Mapping) else None)
    return _finish(osp.splitext(osp.basename(path))[0], backbone, preprocess, checkpoint)


def spec_model(spec: str, checkpoint: Optional[str] = None) -> ErfModel:
    """A registered backbone ``'Family:arch'`` (``'PVTv2:b2'``, see
    :func:`.model_spec.build_spec`), ImageNet-normalised input."""
    return _finish(spec, build_spec(spec), Preprocess(), checkpoint)


def backbone_model(name: str, backbone_cfg: dict, checkpoint: Optional[str] = None) -> ErfModel:
    """The backbone that config ``backbone_cfg`` builds, named ``name``,
    ImageNet-normalised input."""
    return _finish(name, MODELS.build(backbone_cfg), Preprocess(), checkpoint)


def load_model(source: str, checkpoint: Optional[str] = None) -> ErfModel:
    """A config file or a ``'Family:arch'`` spec, see :func:`config_model` and
    :func:`spec_model`."""
    if is_backbone_spec(source):
        return spec_model(source, checkpoint)
    return config_model(source, checkpoint)


# ------------------------------------------------------------------ images
def procedural_images(num: int, size: int, seed: int = 0) -> list[np.ndarray]:
    """``num`` demo scenes (:func:`vattn_mm.datasets.demo_image`) of
    ``size x size``, the same for the same ``seed``."""
    rng = np.random.default_rng(seed)
    return [demo_image(rng, size) for _ in range(num)]


def folder_images(folder: str, size: int, num: Optional[int] = None) -> list[np.ndarray]:
    """The first ``num`` images of ``folder`` (by name; all when None) as RGB,
    resized to ``size x size`` (bicubic)."""
    from PIL import Image
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f'image folder not found: {folder}')
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f'{folder} holds no images ({", ".join(IMAGE_SUFFIXES)})')
    return [np.asarray(Image.open(p).convert('RGB').resize((size, size), Image.BICUBIC))
            for p in files[:num]]


# --------------------------------------------------------------------- ERF
def resolve_stage(backbone: nn.Module, stage: int) -> int:
    """``stage`` (negative: from the end) as an index in ``[0, num_stages)``."""
    count = getattr(backbone, 'num_stages', None)
    if not isinstance(count, int) or not hasattr(backbone, 'out_indices'):
        raise TypeError(f'{type(backbone).__name__} exposes no stages (`num_stages` and '
                        '`out_indices`), so it has no stage output to measure')
    if not -count <= stage < count:
        raise ValueError(f'stage {stage} out of range: {type(backbone).__name__} has {count} '
                         f'stages (0-{count - 1}, or -{count} to -1 from the end)')
    return stage % count


def contributions(backbone: nn.Module, stage: int, batch: torch.Tensor,
                  gradient: str = 'relu') -> torch.Tensor:
    """Per image of ``batch`` ``(N, 3, H, W)``: the gradient of the ReLU of
    stage ``stage``'s central output (summed over channels) with respect to the
    input, ReLU'd (``'relu'``) or absolute (``'abs'``), summed over the input
    channels: ``(N, H, W)``.  The backbone must be in eval mode (images in a
    batch do not interact)."""
    x = batch.detach().float().requires_grad_(True)
    with torch.enable_grad():
        out = backbone(x)[0]
        h, w = out.shape[-2:]
        central = torch.relu(out[:, :, h // 2, w // 2]).sum()
        grad, = torch.autograd.grad(central, x)
    grad = torch.relu(grad) if gradient == 'relu' else grad.abs()
    return grad.sum(1)


def compute_erf(model: ErfModel, stage: int, images: Sequence[np.ndarray], *,
                batch_size: int = 1, gradient: str = 'relu') -> Erf:
    """The ERF of ``model``'s stage ``stage`` over ``images`` (RGB, one size);
    images whose gradient is not finite are left out (RepLKNet).  The
    backbone's mode, ``out_indices`` and ``requires_grad`` flags are
    restored afterwards."""
    if gradient not in GRADIENTS:
        raise ValueError(f'gradient must be one of {GRADIENTS}, got {gradient!r}')
    if not images:
        raise ValueError('no images to measure the ERF on')
    if batch_size < 1:
        raise ValueError(f'batch_size must be >= 1, got {batch_size}')
    backbone = model.backbone
    index = resolve_stage(backbone, stage)
    saved = (backbone.training, backbone.out_indices,
             [p.requires_grad for p in backbone.parameters()])
    total = torch.zeros(images[0].shape[:2], dtype=torch.float64)
    count = 0
    try:
        backbone.eval()
        backbone.requires_grad_(False)
        backbone.out_indices = (index, )
        for start in range(0, len(images), batch_size):
            maps = contributions(backbone, index, model.preprocess(images[start:start + batch_size]),
                                 gradient)
            finite = torch.isfinite(maps).flatten(1).all(1)
            total += maps[finite].double().sum(0)
            count += int(finite.sum())
    finally:
        backbone.train(saved[0])
        backbone.out_indices = saved[1]
        for param, flag in zip(backbone.parameters(), saved[2]):
            param.requires_grad_(flag)
    if not count:
        raise ValueError(f'{model.name}: the gradient is not finite for any image')
    contribution = (total / count).numpy()
    if not contribution.any():
        raise ValueError(f'{model.name}: stage {index} gives zero contribution everywhere (its '
                         'central output is zero after the ReLU for every image)')
    return Erf(model.name, index, contribution, count, gradient)


def display_map(contribution: np.ndarray) -> np.ndarray:
    """``log10(x + 1)`` scaled to a maximum of 1 (RepLKNet's display, on
    which its area ratio is computed)."""
    logged = np.log10(contribution + 1)
    return logged / logged.max()


def area_ratios(display: np.ndarray, thresholds: Sequence[float] = THRESHOLDS
                ) -> list[AreaRatio]:
    """For each threshold ``t`` in (0, 1): the smallest square centred at
    ``(H // 2, W // 2)``, side ``2i + 1`` clipped to the map, holding more
    than ``t`` of the map's total, and its area over ``H * W``."""
    bad = [t for t in thresholds if not 0 < t < 1]
    if bad:
        raise ValueError(f'thresholds must lie in (0, 1), got {bad}')
    h, w = display.shape
    cy, cx = h // 2, w // 2
    integral = np.pad(display.astype(np.float64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    total = integral[-1, -1]
    out = []
    for t in thresholds:
        for i in range(max(h, w)):
            y0, y1, x0, x1 = max(cy - i, 0), min(cy + i + 1, h), max(cx - i, 0), min(cx + i + 1, w)
            held = integral[y1, x1] - integral[y0, x1] - integral[y1, x0] + integral[y0, x0]
            if held > t * total:
                out.append(AreaRatio(t, 2 * i + 1, (y1 - y0) * (x1 - x0) / (h * w)))
                break
    return out


# ------------------------------------------------------------------ output
def ratio_table(erfs: Sequence[Erf], thresholds: Sequence[float] = THRESHOLDS) -> str:
    """Markdown: the area ratios of every ERF (RepLKNet's Table 4 layout)."""
    head = ' | '.join(f't = {t:.0%}' for t in thresholds)
    lines = [f'| model | stage | {head} |', '|---|---|' + '---|' * len(thresholds)]
    for erf in erfs:
        cells = ' | '.join(f'{r.ratio:.1%}' for r in erf.area_ratios(thresholds))
        lines.append(f'| {erf.name} | {erf.stage} | {cells} |')
    return '\n'.join(lines)


def plot_erfs(erfs: Sequence[Erf], path: Path, title: str = '',
              columns: Optional[int] = None) -> None:
    """One heat map per ERF (the display map, RepLKNet's colours: 0 yellow,
    1 green) with its 20 % and 99 % area ratios, in one PNG."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from PIL import Image

    columns = columns or min(len(erfs), 5)
    rows = math.ceil(len(erfs) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.9 * rows + 0.4),
                             squeeze=False)
    image = None
    for ax, erf in zip(axes.flat, erfs):
        image = ax.imshow(erf.display, cmap='RdYlGn', vmin=-1, vmax=1)
        ratios = {r.threshold: r.ratio for r in erf.area_ratios((0.2, 0.99))}
        ax.set_title(f'{erf.name} (stage {erf.stage})\n20%: {ratios[0.2]:.1%} · '
                     f'99%: {ratios[0.99]:.1%}', fontsize=8)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[len(erfs):]:
        ax.axis('off')
    if title:
        fig.suptitle(textwrap.fill(title, 18 * columns), fontsize=8)
    fig.tight_layout()
    fig.colorbar(image, ax=axes, shrink=0.6, boundaries=np.linspace(0, 1, 101),
                 ticks=np.linspace(0, 1, 5), label='log10(contribution + 1), scaled to max 1')
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=90)
    plt.close(fig)
    # a palette of 256 colours halves the file of these noisy maps
    Image.open(buffer).convert('RGB').quantize(256).save(path, optimize=True)


def write_results(erfs: Sequence[Erf], out: Path, stem: str, settings: Mapping) -> list[Path]:
    """``<stem>.png`` (:func:`plot_erfs`), ``<stem>.npz`` (every contribution
    map, by name) and ``<stem>.json`` (``settings`` and the area ratios)
    under ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f'{stem}{suffix}' for suffix in ('.png', '.npz', '.json')]
    plot_erfs(erfs, paths[0], title=settings.get('title', ''))
    np.savez_compressed(paths[1], **{erf.name: erf.contribution.astype(np.float32)
                                     for erf in erfs})
    report = dict(settings, models=[
        dict(name=erf.name, stage=erf.stage, num_images=erf.num_images, gradient=erf.gradient,
             centroid=[round(c, 2) for c in erf.centroid],
             area_ratios=[dict(threshold=r.threshold, side=r.side, ratio=r.ratio)
                          for r in erf.area_ratios()])
        for erf in erfs])
    paths[2].write_text(json.dumps(report, indent=1) + '\n')
    return paths


__all__ = [
    'THRESHOLDS', 'GRADIENTS', 'Preprocess', 'ErfModel', 'AreaRatio', 'Erf', 'load_weights',
    'backbone_model', 'config_model', 'spec_model', 'load_model', 'procedural_images',
    'folder_images', 'resolve_stage', 'contributions', 'compute_erf', 'display_map',
    'area_ratios', 'ratio_table', 'plot_erfs', 'write_results',
]

"""Inference on pictures: :func:`infer` checks every input, runs the
config's task (:mod:`.tasks`) through its upstream Inferencer
(:mod:`.predictors`) and writes the outputs into a folder that replaces the
output folder at the end (:func:`vattn_mm.utils.atomic_io.atomic_dir`).

The output folder receives, per image NAME (its file stem; the file name
where two stems clash)::

    vis/NAME.png      the picture with the prediction drawn
    preds/NAME.json   the prediction: boxes, scores, labels, classes and masks
                      (COCO RLE) / per-class pixel counts and the label map
                      preds/NAME.png / label, class and scores
    infer.json        config, checkpoint, task, device, backend (onnxruntime:
                      the export and its check) and every image's outputs
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Sequence, Union

import cv2
import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.utils import ProgressBar

from ..utils import trust_checkpoint
from ..utils.atomic_io import atomic_dir
from ..utils.safe_load import URI_SCHEME
from .predictors import BACKENDS, Predictor, build_predictor
from .tasks import TASKS, InferError, task_scope

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp', '.ppm', '.pgm')
#: the index file that marks a folder as an output of :func:`infer`
INDEX = 'infer.json'


def infer(config: Union[str, Path], checkpoint: str, source: Union[str, Path],
          out_dir: Union[str, Path, None] = None, *, device: Optional[str] = None,
          score_thr: float = 0.3, trusted: bool = False, backend: str = 'pytorch') -> Path:
    """Run the detector, segmentor or classifier of ``config`` with the
    weights of ``checkpoint`` (a file or an http(s) URL, read by vattn-mm's
    safe loader, fully unpickled only where ``trusted``, and fitting the
    config's model exactly) on the image ``source`` or the images of folder
    ``source`` (not its sub-folders); returns the output folder.

    Args:
        out_dir: default ``work_dirs/<config name>/infer``; replaced only if
            it is absent, empty or an earlier output of this function.
        device: e.g. ``cpu``, ``cuda``, ``cuda:1`` (default: ``cuda`` if available).
        score_thr: detection: draw boxes scoring at least this (the JSON has all).
        backend: ``pytorch``, or ``onnxruntime``: the backbone (and neck) run
            by onnxruntime on the CPU (default device there ``cpu``),
            exported once per weights into ``torch.hub.get_dir()/onnx`` and
            checked against PyTorch in each run; the heads stay in PyTorch
            (:func:`vattn_mm.deploy.use_onnxruntime`).

    Raises:
        InferError: on bad input, before the model runs; a failed run leaves
            ``out_dir`` as it was.
        OnnxCheckError: backend onnxruntime, where the export does not
            match PyTorch (the file is removed from the cache).
    """
    config, checkpoint = str(config), str(checkpoint)
    if backend not in BACKENDS:
        raise InferError(f'unknown backend {backend!r}; choose from {", ".join(BACKENDS)}')
    if backend == 'onnxruntime':
        device = device or 'cpu'
        if torch.device(device).type != 'cpu':
            raise InferError(f'--backend onnxruntime runs on the CPU, not on {device}; '
                             'use --device cpu')
        if importlib.util.find_spec('onnxruntime') is None:
            raise InferError("--backend onnxruntime needs onnxruntime: pip install -e '.[deploy]'")
    if trusted:
        trust_checkpoint(checkpoint)
    if not os.path.isfile(config):
        raise InferError(f'config file not found: {config}')
    cfg = Config.fromfile(config)
    scope = task_scope(cfg, config)
    if not (URI_SCHEME.match(checkpoint) or os.path.isfile(checkpoint)):
        raise InferError(f'checkpoint not found: {checkpoint}')
    images = collect_images(str(source))
    names = output_names(images)
    out_dir = Path(out_dir or Path('work_dirs') / Path(config).stem / 'infer')
    check_out_dir(out_dir)
    device = resolve_device(device)

    with atomic_dir(out_dir) as tmp:
        with DefaultScope.overwrite_default_scope(scope):  # the Inferencers set it globally
            predict, placed = build_predictor(scope, cfg, checkpoint, device,
                                              score_thr=score_thr, scratch=tmp / 'scratch',
                                              backend=backend)
            index = run_images(predict, images, names, tmp)
        shutil.rmtree(tmp / 'scratch', ignore_errors=True)
        index = dict(config=config, checkpoint=checkpoint, task=TASKS[scope], device=device,
                     **placed, images=index)
        (tmp / INDEX).write_text(json.dumps(index, indent=2))
    return out_dir


# ---------------------------------------------------------------- checks of the inputs

def collect_images(source: str) -> list[Path]:
    """The image ``source`` or the images of folder ``source`` (sorted, not
    recursive), every one decoded once to make sure it reads."""
    path = Path(source)
    if path.is_dir():
        images = sorted(p for p in path.iterdir()
                        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not images:
            raise InferError(f'no images in folder {source} (looked for files ending in '
                             f'{", ".join(IMAGE_SUFFIXES)}; sub-folders are not searched)')
    elif path.is_file():
        images = [path]
    else:
        raise InferError(f'no such image or folder: {source}')
    unreadable = [str(p) for p in images if not decodes(p)]
    if unreadable:
        raise InferError(f'{len(unreadable)} of {len(images)} image(s) cannot be read (empty, '
                         f'truncated or not an image?): {", ".join(unreadable[:10])}'
                         + (' ...' if len(unreadable) > 10 else ''))
    return images


def decodes(path: Path) -> bool:
    """Whether OpenCV (the loaders' backend) decodes ``path``."""
    try:
        return cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_COLOR) is not None
    except (cv2.error, OSError, ValueError):
        return False


def output_names(images: Sequence[Path]) -> list[str]:
    """Each image's output name: its stem, or its file name where stems clash."""
    stems = [p.stem for p in images]
    return [p.stem if stems.count(p.stem) == 1 else p.name for p in images]


def check_out_dir(out_dir: Path) -> None:
    """``out_dir`` may be replaced: absent, empty or an earlier output."""
    if out_dir.exists() and not (out_dir.is_dir() and (
            not any(out_dir.iterdir()) or (out_dir / INDEX).is_file())):
        raise InferError(f'--out-dir {out_dir} exists and is not an output of tools/infer.py '
                         f'(no {INDEX}); choose another folder or remove it')


def resolve_device(device: Optional[str]) -> str:
    """``device``, checked to be there (default: ``cuda`` if available, else ``cpu``)."""
    if device is None:
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise InferError(f'--device {device!r} is not a device: {err}') from err
    if parsed.type == 'cuda' and not torch.cuda.is_available():
        raise InferError(f'--device {device}: no CUDA device is available; use --device cpu')
    if parsed.type == 'cuda' and (parsed.index or 0) >= torch.cuda.device_count():
        raise InferError(f'--device {device}: only {torch.cuda.device_count()} CUDA device(s)')
    return device


# ---------------------------------------------------------------- the outputs

def run_images(predict: Predictor, images: Sequence[Path], names: Sequence[str],
               out: Path) -> list[dict]:
    """Predict every image with a progress bar; write its picture, JSON and
    label maps under ``out``; return the index entries."""
    for sub in ('vis', 'preds'):
        (out / sub).mkdir()
    entries = []
    bar = ProgressBar(len(images), file=sys.stdout)
    for path, name in zip(images, names):
        pred, vis, maps = predict(path)
        entry = dict(image=str(path), vis=f'vis/{name}.png', json=f'preds/{name}.json')
        write_image(out / entry['vis'], np.ascontiguousarray(vis[..., ::-1]))  # RGB -> BGR
        for key, array in maps.items():
            entry[key] = pred[key] = f'preds/{name}.png'
            write_image(out / entry[key], array)
        (out / entry['json']).write_text(json.dumps(dict(image=str(path), **pred)))
        entries.append(entry)
        bar.update()
    bar.file.write('\n')
    return entries


def write_image(path: Path, array: np.ndarray) -> None:
    if not cv2.imwrite(str(path), array):
        raise OSError(f'could not write {path}')

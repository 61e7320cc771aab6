"""Run a trained detector, segmentor or classifier on pictures.

    python tools/infer.py CONFIG CHECKPOINT IMAGE_OR_FOLDER [--out-dir DIR] [--device DEVICE]
                          [--score-thr 0.3] [--trust-checkpoint]

The task comes from the config (its ``default_scope``, else its model type):
mmdet (detection, instance segmentation), mmseg (semantic segmentation) or
mmpretrain (classification), run through the upstream ``DetInferencer``,
``MMSegInferencer`` and ``ImageClassificationInferencer``.  CHECKPOINT (a file
or an http(s) URL) is read with vattn-mm's safe loader and must fit the
config's model exactly.  A folder is read without its sub-folders.

OUT_DIR (default ``work_dirs/<config name>/infer``) receives, per image NAME
(its file stem; the file name where two stems clash):

    vis/NAME.png      the picture with the prediction drawn
    preds/NAME.json   the prediction: boxes, scores, labels, classes and masks
                      (COCO RLE) / per-class pixel counts and the label map
                      preds/NAME.png / label, class and scores
    infer.json        config, checkpoint, task, device and every image's outputs

Every input is checked before the model runs, and the outputs are written into
a temporary folder beside OUT_DIR that replaces it at the end: a failed run
leaves OUT_DIR as it was.  An existing OUT_DIR is replaced only if it is empty
or an earlier output of this tool.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Mapping, Optional, Sequence

import vattn_mm  # noqa: F401  (registers the backbones before any config is read)
import cv2
import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner.checkpoint import _load_checkpoint_to_model
from mmengine.utils import ProgressBar

from vattn_mm.engine import ExactCheckpointHook
from vattn_mm.utils import load_runner_checkpoint, trust_checkpoint
from vattn_mm.utils.atomic_io import TMP_PREFIX, current_umask
from vattn_mm.utils.safe_load import URI_SCHEME

#: the config scopes this tool runs, with the task each stands for
TASKS = {'mmdet': 'detection', 'mmseg': 'semantic segmentation', 'mmpretrain': 'classification'}
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp', '.ppm', '.pgm')
#: the index file that marks a folder as this tool's output
INDEX = 'infer.json'


class InferError(ValueError):
    """Bad input to tools/infer.py: an unreadable image, an empty folder, an
    unsupported config, a device that is not there."""


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='mmdet, mmseg or mmpretrain config file')
    parser.add_argument('checkpoint', help='checkpoint file or http(s) URL')
    parser.add_argument('input', help='an image or a folder of images')
    parser.add_argument('--out-dir', help='output folder (default: work_dirs/<config name>/infer)')
    parser.add_argument('--device', help='e.g. cpu, cuda, cuda:1 (default: cuda if available)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection: draw boxes scoring at least this (the JSON has all)')
    parser.add_argument('--trust-checkpoint', action='store_true',
                        help='allow full unpickling of CHECKPOINT (only for a trusted source)')
    return parser.parse_args(argv)


# ---------------------------------------------------------------- checks of the inputs

def model_registry(scope: str):
    """The ``MODELS`` registry of an upstream scope, its modules imported."""
    models = importlib.import_module(f'{scope}.registry').MODELS
    models.import_from_location()
    return models


def task_scope(cfg: Config, config: str) -> str:
    """The scope of ``cfg`` (``mmdet``, ``mmseg`` or ``mmpretrain``), after
    checking that its model is a detector, segmentor or classifier."""
    model_type = str(cfg.get('model', {}).get('type', ''))
    scope = cfg.get('default_scope')
    if '.' in model_type:  # 'mmdet.MaskRCNN'
        scope, model_type = model_type.split('.', 1)
    if scope is None:
        found = [s for s in TASKS if model_type in model_registry(s).module_dict]
        if len(found) != 1:
            raise InferError(
                f'{config}: unknown task: no default_scope, and the model type {model_type!r} is '
                + (f'registered in {" and ".join(found)}' if found else
                   'not a model of mmdet, mmseg or mmpretrain') + '; set default_scope')
        scope = found[0]
    if scope not in TASKS:
        raise InferError(f'{config}: a config of another task (default_scope {scope!r}); '
                         'tools/infer.py runs ' + ', '.join(f'{s} ({t})' for s, t in TASKS.items())
                         + ' configs')
    model_cls = model_registry(scope).get(model_type)
    if model_cls is None:
        raise InferError(f'{config}: unknown task: no {scope} model is called {model_type!r}')
    if not supported_model(scope, model_cls):
        raise InferError(f'{config}: a config of another task: its {scope} model '
                         f'{model_type!r} is not a model for {TASKS[scope]}')
    return scope


def supported_model(scope: str, model_cls: type) -> bool:
    """Whether the Inferencer of ``scope`` handles ``model_cls``'s predictions."""
    if scope == 'mmdet':
        from mmdet.models.detectors import BaseDetector
        return issubclass(model_cls, BaseDetector)
    if scope == 'mmseg':
        from mmseg.models.segmentors import DepthEstimator, EncoderDecoder
        return issubclass(model_cls, EncoderDecoder) and not issubclass(model_cls, DepthEstimator)
    from mmpretrain.models.classifiers import BaseClassifier
    return issubclass(model_cls, BaseClassifier)


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


# ---------------------------------------------------------------- the model

def fitting_checkpoint(model: torch.nn.Module, source: str) -> dict:
    """Checkpoint ``source`` read safely (weights only unless trusted; URLs
    too), raising ``CheckpointMismatchError`` unless it fits ``model`` key by
    key and shape by shape (the check ``tools/test.py`` makes)."""
    checkpoint = load_runner_checkpoint(source, map_location='cpu')
    if not isinstance(checkpoint, Mapping):
        raise InferError(f'{source} holds a {type(checkpoint).__name__}, not a checkpoint')
    ExactCheckpointHook().after_load_checkpoint(
        SimpleNamespace(model=model, cfg={'load_from': source}), checkpoint)
    return dict(checkpoint)


class SafeWeights:
    """Mixin for mmengine-based Inferencers: the model is built without
    weights (mmengine would ``torch.load`` them itself) and then gets the
    checkpoint through :func:`fitting_checkpoint` and the Inferencer's own
    ``_load_weights_to_model`` (class names and palette from its meta)."""

    def _init_model(self, cfg, weights, device='cpu'):
        with warnings.catch_warnings():  # the no-weights warnings of the first step
            warnings.filterwarnings('ignore', 'Checkpoint is not loaded')
            warnings.filterwarnings('ignore', 'weights is None')
            model = super()._init_model(cfg, None, device)
        self._load_weights_to_model(model, fitting_checkpoint(model, weights), cfg)
        return model


def build_det(cfg: Config, checkpoint: str, device: str, args) -> Callable:
    from mmdet.apis import DetInferencer

    class SafeDetInferencer(SafeWeights, DetInferencer):
        pass

    inferencer = SafeDetInferencer(cfg, checkpoint, device=device, show_progress=False)
    classes = inferencer.model.dataset_meta['classes']

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        out = inferencer(str(path), return_vis=True, no_save_vis=True,
                         pred_score_thr=args.score_thr)
        pred = out['predictions'][0]
        pred['classes'] = [classes[label] for label in pred['labels']]
        return pred, out['visualization'][0], {}
    return predict


def build_seg(cfg: Config, checkpoint: str, device: str, args) -> Callable:
    from mmseg.apis import MMSegInferencer

    class SafeSegInferencer(SafeWeights, MMSegInferencer):
        pass

    inferencer = SafeSegInferencer(cfg, checkpoint, device=device)
    inferencer.show_progress = False
    classes = list(inferencer.model.dataset_meta['classes'])

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        out = inferencer(str(path), return_vis=True)
        label_map = out['predictions']
        counts = np.bincount(label_map.ravel(), minlength=len(classes))
        pred = dict(classes=classes, height=label_map.shape[0], width=label_map.shape[1],
                    pixels={classes[i]: int(n) for i, n in enumerate(counts) if n})
        dtype = np.uint8 if len(classes) <= 256 else np.uint16
        return pred, out['visualization'], {'sem_seg': label_map.astype(dtype)}
    return predict


def build_cls(cfg: Config, checkpoint: str, device: str, args, scratch: Path) -> Callable:
    from mmpretrain.apis import ImageClassificationInferencer, get_model

    model = get_model(cfg, pretrained=False, device=device)
    loaded = fitting_checkpoint(model, checkpoint)
    _load_checkpoint_to_model(model, loaded, strict=True)
    meta = loaded.get('meta', {}).get('dataset_meta')
    if meta:  # class names as mmpretrain's get_model takes them
        model._dataset_meta = meta
    inferencer = ImageClassificationInferencer(model, pretrained=False, device=device)

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        # the Inferencer's steps one by one: its __call__ adds a progress bar
        # per call and draws only into files
        preds = inferencer.forward(next(inferencer.preprocess([str(path)])))
        vis = inferencer.visualize([str(path)], preds, show_dir=str(scratch))
        pred = inferencer.postprocess(preds, vis)[0]
        pred['pred_scores'] = pred['pred_scores'].tolist()
        return pred, vis[0], {}
    return predict


# ---------------------------------------------------------------- the run

def replace_dir(new: Path, target: Path) -> None:
    """Put folder ``new`` where ``target`` is (an earlier output is removed
    only once ``new`` is in place)."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f'{TMP_PREFIX}{target.name}.old-', dir=target.parent))
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def infer(args: argparse.Namespace) -> Path:
    """Run ``args`` (see :func:`parse_args`); returns the output folder."""
    if args.trust_checkpoint:
        trust_checkpoint(args.checkpoint)
    if not os.path.isfile(args.config):
        raise InferError(f'config file not found: {args.config}')
    cfg = Config.fromfile(args.config)
    scope = task_scope(cfg, args.config)
    if not (URI_SCHEME.match(args.checkpoint) or os.path.isfile(args.checkpoint)):
        raise InferError(f'checkpoint not found: {args.checkpoint}')
    images = collect_images(args.input)
    names = output_names(images)
    out_dir = Path(args.out_dir or Path('work_dirs') / Path(args.config).stem / 'infer')
    check_out_dir(out_dir)
    device = resolve_device(args.device)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f'{TMP_PREFIX}{out_dir.name}.', dir=out_dir.parent))
    tmp.chmod(0o777 & ~current_umask())  # a folder as mkdir makes it, not mkdtemp's 0700
    try:
        with DefaultScope.overwrite_default_scope(scope):  # the Inferencers set it globally
            if scope == 'mmpretrain':
                predict = build_cls(cfg, args.checkpoint, device, args, tmp / 'scratch')
            else:
                predict = (build_det if scope == 'mmdet' else build_seg)(
                    cfg, args.checkpoint, device, args)
            index = run_images(predict, images, names, tmp)
        shutil.rmtree(tmp / 'scratch', ignore_errors=True)
        index = dict(config=args.config, checkpoint=args.checkpoint, task=TASKS[scope],
                     device=device, images=index)
        (tmp / INDEX).write_text(json.dumps(index, indent=2))
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def run_images(predict: Callable, images: Sequence[Path], names: Sequence[str],
               out: Path) -> list[dict]:
    """Predict every image with a progress bar; write its picture, JSON and
    extra maps under ``out``; return the index entries."""
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


def main(argv: Optional[Sequence[str]] = None) -> None:
    from vattn_mm.backbones import CheckpointError
    from vattn_mm.utils import (CheckpointDownloadError, UnreadableCheckpointError,
                                UntrustedCheckpointError)

    args = parse_args(argv)
    try:
        out_dir = infer(args)
    except (InferError, CheckpointError, CheckpointDownloadError, UnreadableCheckpointError,
            UntrustedCheckpointError, FileNotFoundError) as err:
        sys.exit(f'tools/infer.py: error: {err}')
    print(f'pictures in {out_dir}/vis, predictions in {out_dir}/preds, index {out_dir}/{INDEX}')


if __name__ == '__main__':
    main()

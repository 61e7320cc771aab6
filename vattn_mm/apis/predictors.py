"""The upstream Inferencers (mmdet's ``DetInferencer``, mmseg's
``MMSegInferencer``, mmpretrain's ``ImageClassificationInferencer``) with the
checkpoint read by vattn-mm's safe loader and checked to fit the model, each
wrapped as a predictor: ``predict(path) -> (prediction, picture, label maps)``
with a JSON-ready prediction, the picture drawn (RGB) and the maps to write as
PNG files (name -> array).  With ``backend='onnxruntime'`` the model's
dense part runs in onnxruntime (:func:`vattn_mm.deploy.use_onnxruntime`)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import torch
from mmengine.config import Config
from mmengine.runner.checkpoint import _load_checkpoint_to_model

from ..engine import check_checkpoint_fits
from ..utils import load_runner_checkpoint
from .tasks import InferError

#: ``predict(image path) -> (prediction, picture, label maps)``
Predictor = Callable[[Path], tuple[dict, np.ndarray, dict]]
#: what runs the backbone (and neck): ``pytorch``, or ``onnxruntime`` (CPU;
#: the export cached by the weights' hash, checked against PyTorch first)
BACKENDS = ('pytorch', 'onnxruntime')


def place_backend(model: torch.nn.Module, backend: str) -> dict:
    """Put ``backend`` in charge of ``model``'s dense part; what
    ``infer.json`` records of it."""
    if backend == 'pytorch':
        return dict(backend=backend)
    from ..deploy import use_onnxruntime
    checks = use_onnxruntime(model)
    return dict(backend=backend, onnx=str(model.backbone.path),
                onnx_check={f'{c.size[0]}x{c.size[1]} {c.output}': c.rel_error for c in checks})


def fitting_checkpoint(model: torch.nn.Module, source: str) -> dict:
    """Checkpoint ``source`` read safely (weights only unless trusted; URLs
    too), raising ``CheckpointMismatchError`` unless it fits ``model`` key by
    key and shape by shape (the check ``tools/test.py`` makes)."""
    checkpoint = load_runner_checkpoint(source, map_location='cpu')
    if not isinstance(checkpoint, Mapping):
        raise InferError(f'{source} holds a {type(checkpoint).__name__}, not a checkpoint')
    check_checkpoint_fits(model, checkpoint, source)
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


def detection_predictor(cfg: Config, checkpoint: str, device: str,
                        score_thr: float, backend: str) -> tuple[Predictor, dict]:
    """Boxes, scores, labels, class names and masks (COCO RLE); boxes scoring
    at least ``score_thr`` drawn."""
    from mmdet.apis import DetInferencer

    class SafeDetInferencer(SafeWeights, DetInferencer):
        pass

    inferencer = SafeDetInferencer(cfg, checkpoint, device=device, show_progress=False)
    classes = inferencer.model.dataset_meta['classes']
    placed = place_backend(inferencer.model, backend)

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        out = inferencer(str(path), return_vis=True, no_save_vis=True, pred_score_thr=score_thr)
        pred = out['predictions'][0]
        pred['classes'] = [classes[label] for label in pred['labels']]
        return pred, out['visualization'][0], {}
    return predict, placed


def segmentation_predictor(cfg: Config, checkpoint: str, device: str,
                           backend: str) -> tuple[Predictor, dict]:
    """Per-class pixel counts and the label map (``sem_seg``)."""
    from mmseg.apis import MMSegInferencer

    class SafeSegInferencer(SafeWeights, MMSegInferencer):
        pass

    inferencer = SafeSegInferencer(cfg, checkpoint, device=device)
    inferencer.show_progress = False
    classes = list(inferencer.model.dataset_meta['classes'])
    placed = place_backend(inferencer.model, backend)

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        out = inferencer(str(path), return_vis=True)
        label_map = out['predictions']
        counts = np.bincount(label_map.ravel(), minlength=len(classes))
        pred = dict(classes=classes, height=label_map.shape[0], width=label_map.shape[1],
                    pixels={classes[i]: int(n) for i, n in enumerate(counts) if n})
        dtype = np.uint8 if len(classes) <= 256 else np.uint16
        return pred, out['visualization'], {'sem_seg': label_map.astype(dtype)}
    return predict, placed


def classification_predictor(cfg: Config, checkpoint: str, device: str, scratch: Path,
                             backend: str) -> tuple[Predictor, dict]:
    """Label, class, score and every class's score; the Inferencer draws its
    pictures into files, under ``scratch``."""
    from mmpretrain.apis import ImageClassificationInferencer, get_model

    model = get_model(cfg, pretrained=False, device=device)
    loaded = fitting_checkpoint(model, checkpoint)
    _load_checkpoint_to_model(model, loaded, strict=True)
    meta = loaded.get('meta', {}).get('dataset_meta')
    if meta:  # class names as mmpretrain's get_model takes them
        model._dataset_meta = meta
    placed = place_backend(model.eval(), backend)
    inferencer = ImageClassificationInferencer(model, pretrained=False, device=device)

    def predict(path: Path) -> tuple[dict, np.ndarray, dict]:
        # the Inferencer's steps one by one: its __call__ adds a progress bar
        # per call and draws only into files
        preds = inferencer.forward(next(inferencer.preprocess([str(path)])))
        vis = inferencer.visualize([str(path)], preds, show_dir=str(scratch))
        pred = inferencer.postprocess(preds, vis)[0]
        pred['pred_scores'] = pred['pred_scores'].tolist()
        return pred, vis[0], {}
    return predict, placed


def build_predictor(scope: str, cfg: Config, checkpoint: str, device: str, *,
                    score_thr: float, scratch: Path,
                    backend: str = 'pytorch') -> tuple[Predictor, dict]:
    """The predictor of ``scope``'s task (:data:`vattn_mm.apis.TASKS`) and
    what :func:`place_backend` records."""
    if scope == 'mmdet':
        return detection_predictor(cfg, checkpoint, device, score_thr, backend)
    if scope == 'mmseg':
        return segmentation_predictor(cfg, checkpoint, device, backend)
    return classification_predictor(cfg, checkpoint, device, scratch, backend)

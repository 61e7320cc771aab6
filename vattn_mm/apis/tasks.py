"""Which upstream codebase runs a config: mmdet (detection, instance
segmentation), mmseg (semantic segmentation) or mmpretrain (classification),
from its ``default_scope`` or else its model type."""
from __future__ import annotations

import importlib

from mmengine.config import Config

#: the config scopes :func:`vattn_mm.apis.infer` runs, with the task each stands for
TASKS = {'mmdet': 'detection', 'mmseg': 'semantic segmentation', 'mmpretrain': 'classification'}


class InferError(ValueError):
    """Bad input to :func:`vattn_mm.apis.infer` (``tools/infer.py``): an
    unreadable image, an empty folder, an unsupported config, a device that
    is not there."""


def model_registry(scope: str):
    """The ``MODELS`` registry of an upstream scope, its modules imported."""
    models = importlib.import_module(f'{scope}.registry').MODELS
    models.import_from_location()
    return models


def task_scope(cfg: Config, config: str) -> str:
    """The scope of ``cfg`` (``mmdet``, ``mmseg`` or ``mmpretrain``), after
    checking that its model is a detector, segmentor or classifier; ``config``
    names it in the errors."""
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

"""A config's training recipe as plain values, in the terms the papers' official
configs use, so that a config can be compared with the official run it
reproduces (``Official Values`` in ``configs/metafiles/*.yml``, docs/backbones.md).

:func:`resolved_recipe` reads a loaded mmengine config (nothing is built):

    optimizer, lr, weight_decay, betas   the optimizer (betas: AdamW's default where unset)
    paramwise                            the optimizer wrapper's ``paramwise_cfg`` ({} if none)
    grad_clip                            the gradient norm clip's ``max_norm`` (None if none)
    precision                            fp32, or fp16 / bf16 mixed precision (``AmpOptimWrapper``)
    schedule                             {by: epoch | iter, length, warmup_iters, warmup_ratio,
                                          decay: step | poly | cosine, decay_begin (where the
                                          decay counts from: a warm-up overlapping it scales
                                          it, as in mmcv 1.x), milestones, gamma, power,
                                          min_lr}: only the keys that apply
    batch_per_gpu, base_batch_size       ``train_dataloader.batch_size`` and the batch the lr is
                                         declared for (``auto_scale_lr.base_batch_size``)
    drop_path_rate, frozen_stages,       the backbone's, its class's default where the config
    norm_eval                            leaves them unset (None where it takes no such argument)
    sync_bn                              any norm layer of the model is SyncBN
    train_scale, test_scale              the training pipeline's resize scale(s) and the test
                                         pipeline's (lists; a range as [min, max] pairs)
    test_resize                          the test pipeline's resize transform (``Resize`` keeps the
                                         ratio; ``AlignResize`` then stretches each side to a
                                         multiple of 32, as the PVT-family segmentation code does)
    crop_size                            the training crop (segmentation; None if none)
    pretrained                           the backbone's pretrained checkpoint as the config
                                         names it (address or path; compared with an
                                         official one by :func:`same_checkpoint`)
"""
from __future__ import annotations

import inspect
import posixpath
from typing import Any, Iterator, Optional

#: AdamW / Adam's default betas, which a config leaving them unset uses
DEFAULT_BETAS = (0.9, 0.999)
#: the warm-up schedulers (linear warm-up from ``start_factor``)
_WARMUP = ('LinearLR', )
_DECAY = {'MultiStepLR': 'step', 'PolyLR': 'poly', 'CosineAnnealingLR': 'cosine'}
#: pipeline transforms that set the image scale
_RESIZES = ('Resize', 'RandomResize', 'RandomChoiceResize', 'AlignResize')

#: the keys of a recipe, in the order they are reported
KEYS = ('optimizer', 'lr', 'weight_decay', 'betas', 'paramwise', 'grad_clip', 'precision',
        'schedule', 'batch_per_gpu', 'base_batch_size', 'drop_path_rate', 'frozen_stages',
        'norm_eval', 'sync_bn', 'train_scale', 'test_scale', 'test_resize', 'crop_size', 'pretrained')


def _plain(value: Any) -> Any:
    """Config values as YAML-comparable ones: tuples as lists, ConfigDicts as
    dicts (keys sorted), floats kept."""
    if isinstance(value, dict):
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _optimizer(cfg: Any) -> dict:
    wrapper = cfg.get('optim_wrapper', {})
    opt = wrapper.get('optimizer', {})
    betas = opt.get('betas')
    if betas is None and opt.get('type') in ('Adam', 'AdamW'):
        betas = DEFAULT_BETAS
    clip = wrapper.get('clip_grad')
    return {
        'optimizer': opt.get('type'),
        'lr': opt.get('lr'),
        'weight_decay': opt.get('weight_decay', 0.),
        'betas': _plain(betas),
        'paramwise': _plain(wrapper.get('paramwise_cfg', {})),
        'grad_clip': None if not clip else clip.get('max_norm'),
        'precision': ('fp32' if wrapper.get('type') != 'AmpOptimWrapper' else
                      'bf16' if wrapper.get('dtype') in ('bfloat16', 'bf16') else 'fp16'),
    }


def _schedule(cfg: Any) -> dict:
    train_cfg = cfg.get('train_cfg', {})
    by_epoch = train_cfg.get('type') == 'EpochBasedTrainLoop' or 'max_epochs' in train_cfg
    schedule: dict = {'by': 'epoch' if by_epoch else 'iter',
                      'length': train_cfg.get('max_epochs' if by_epoch else 'max_iters')}
    schedulers = cfg.get('param_scheduler') or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    for sched in schedulers:
        kind = sched.get('type')
        if kind in _WARMUP:
            schedule['warmup_iters'] = sched.get('end', 0) - sched.get('begin', 0)
            schedule['warmup_ratio'] = sched.get('start_factor', 1. / 3)
        elif kind in _DECAY:
            schedule['decay'] = _DECAY[kind]
            schedule['decay_begin'] = sched.get('begin', 0)
            if kind == 'MultiStepLR':
                schedule['milestones'] = _plain(sched.get('milestones'))
                schedule['gamma'] = sched.get('gamma', 0.1)
            elif kind == 'PolyLR':
                schedule['power'] = sched.get('power', 1.)
                schedule['min_lr'] = sched.get('eta_min', 0.)
            else:
                schedule['min_lr'] = sched.get('eta_min', 0.)
        else:
            schedule.setdefault('other', []).append(kind)
    return schedule


def _walk(value: Any) -> Iterator[dict]:
    """Every dict inside ``value`` (itself included)."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk(v)


def _scales(pipeline: Optional[list]) -> tuple[Optional[list], Optional[list], Optional[str]]:
    """(the resize scales, the crop size, the resize transform) of a data pipeline."""
    scales, crop, resize = None, None, None
    for step in _walk(pipeline or []):
        kind = step.get('type')
        if kind in _RESIZES and scales is None:
            scale = step.get('scales', step.get('scale', step.get('img_scale')))
            if scale is not None:
                resize = kind
                scales = _plain(scale if kind == 'RandomChoiceResize' else [scale])
                if step.get('ratio_range') is not None:
                    scales = [scales[0], _plain(step['ratio_range'])]
        elif kind in ('RandomCrop', 'RandomSizeCrop') and crop is None:
            crop = _plain(step.get('crop_size'))
    return scales, crop, resize


def _pipeline(loader: Any) -> Optional[list]:
    dataset = (loader or {}).get('dataset', {})
    while 'pipeline' not in dataset and 'dataset' in dataset:   # wrappers (RepeatDataset, ...)
        dataset = dataset['dataset']
    return dataset.get('pipeline')


def _backbone_arguments(backbone: dict, names: tuple) -> dict:
    """The backbone's ``names`` arguments: set in the config, else its
    class's defaults (ours; another codebase's where the type is prefixed
    with its scope), else None."""
    from mmengine.registry import MODELS
    defaults: dict = {}
    kind = backbone.get('type')
    cls = MODELS.get(kind) if isinstance(kind, str) else kind
    for klass in reversed(getattr(cls, '__mro__', ())):    # a subclass's default wins
        if '__init__' in vars(klass):
            params = inspect.signature(vars(klass)['__init__']).parameters
            defaults.update({n: p.default for n, p in params.items() if p.default is not p.empty})
    return {name: _plain(backbone.get(name, defaults.get(name))) for name in names}


def same_checkpoint(ours: Optional[str], official: Optional[str]) -> bool:
    """Whether a config's ``pretrained`` loads the official config's checkpoint.

    An official address (``scheme://...``) is compared whole: one file name in
    two releases need not be one file.  An official local path
    (``pretrained/pvt_v2_b2.pth``, a file the user downloads and places by
    hand) names no source, so then only the file names are compared."""
    if ours is None or official is None:
        return ours is official
    if '://' in official:
        return ours == official
    return posixpath.basename(ours) == posixpath.basename(official)


def resolved_recipe(cfg: Any) -> dict:
    """The recipe of a loaded config (see the module's docstring)."""
    model = cfg.get('model', {})
    backbone = model.get('backbone', {})
    init_cfg = backbone.get('init_cfg') or {}
    checkpoint = init_cfg.get('checkpoint') if isinstance(init_cfg, dict) else None
    train_scale, crop, _ = _scales(_pipeline(cfg.get('train_dataloader')))
    test_scale, _, test_resize = _scales(_pipeline(cfg.get('test_dataloader')))
    recipe = dict(_optimizer(cfg), schedule=_schedule(cfg))
    recipe.update(
        batch_per_gpu=(cfg.get('train_dataloader') or {}).get('batch_size'),
        base_batch_size=(cfg.get('auto_scale_lr') or {}).get('base_batch_size'),
        **_backbone_arguments(backbone, ('drop_path_rate', 'frozen_stages', 'norm_eval')),
        sync_bn=any(d.get('type') == 'SyncBN' for d in _walk(model)),
        train_scale=train_scale, test_scale=test_scale, test_resize=test_resize, crop_size=crop,
        pretrained=checkpoint or None)
    return {key: recipe[key] for key in KEYS}

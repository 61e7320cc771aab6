"""Export a vattn-mm backbone as an mmpretrain ``ImageClassifier``.

Sources: a trained vattn-mm detector / segmentor checkpoint with its config,
or an official released ImageNet checkpoint.  The classifier is the same
registered backbone with ``out_indices=(last stage,)``, a
``GlobalAveragePooling`` neck and a ``LinearClsHead``.

Every official ImageNet classifier of the six transformer families computes
``head(mean over tokens of final_norm(last-stage tokens))`` (PVTv2 / QuadTree:
``norm4``; LITv2 / FocalNet / DilateFormer: ``norm``; P2T: no norm).  That
final norm is the last stage's output norm of our backbone (PVTv2 / QuadTree
already hold it; for the others it goes into the dense output-norm slot with
the same LayerNorm eps), so GAP + linear head reproduce the official logits.
EfficientViT's ``ClsHead`` is more (1x1 conv + BN + act, pooling, linear +
LayerNorm + act, linear): all but its last linear layer become the
registered :class:`~vattn_mm.layers.EfficientViTClsNeck` (the family's
``imagenet_neck`` / ``classifier_head_keys``), so its export gives the official
logits too.  Exports of trained detectors / segmentors get GAP + an untrained
linear head for every family.
"""
from __future__ import annotations

import copy
import inspect
import os.path as osp
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

import torch
from torch import nn

from ..backbones import (CheckpointError, backbone_class, build_backbone, extract_state_dict,
                         read_checkpoint)
from ..backbones.loading import StateDict
from .convert import (Arch, check_output, match_backbone, official_state_dict,
                      official_to_vattn, save_checkpoint, save_text)

CLS_BASES = ('mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
             'mmpretrain::_base_/default_runtime.py')
#: dense-training settings that make no sense for a classifier
_DENSE_ONLY_ARGS = ('init_cfg', 'frozen_stages', 'norm_eval')


@dataclass
class ClassifierExport:
    """An mmpretrain classifier config and the weights that go with it."""

    model: dict
    num_classes: int
    state_dict: StateDict
    source: str
    has_head: bool
    notes: list[str] = field(default_factory=list)
    #: backbone parameters the classifier never uses (DDP then needs
    #: ``find_unused_parameters=True``)
    unused: list[str] = field(default_factory=list)


def classifier_model(backbone_cfg: dict, in_channels: int, num_classes: int,
                     neck: Optional[dict] = None) -> dict:
    """``ImageClassifier`` = backbone + neck (default GAP) + linear head."""
    return dict(
        type='ImageClassifier',
        backbone=backbone_cfg,
        neck=neck or dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=in_channels,
                  loss=dict(type='CrossEntropyLoss', loss_weight=1.0),
                  topk=(1, 5) if num_classes >= 5 else (1, )))


def build_classifier(model_cfg: dict, device: str = 'meta') -> nn.Module:
    """Build ``model_cfg`` from mmpretrain's registry on ``device``."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'), torch.device(device):
        return MODELS.build(copy.deepcopy(model_cfg))


def _init_values(model: nn.Module, keys: set[str]) -> StateDict:
    """Initial values of ``keys`` (dense-only norms the source lacks):
    their modules are materialised and reset, nothing else."""
    values = {}
    for owner in sorted({k.rsplit('.', 1)[0] for k in keys}):
        module = model.get_submodule(owner).to_empty(device='cpu')
        if not hasattr(module, 'reset_parameters'):
            raise CheckpointError(f'cannot initialise {owner} ({type(module).__name__})')
        with torch.no_grad():
            module.reset_parameters()
        values.update({f'{owner}.{k}': v for k, v in module.state_dict().items()})
    return {k: values[k] for k in keys}


def complete_state_dict(model_cfg: dict, sd: StateDict, fill: set[str],
                        has_head: bool) -> StateDict:
    """Check ``sd`` against the classifier built from ``model_cfg`` and add
    the initial values of the ``fill`` keys, so the result loads strictly
    (``head.*`` may be absent when ``has_head`` is False)."""
    model = build_classifier(model_cfg)
    model_sd = model.state_dict()
    missing = model_sd.keys() - sd.keys()
    allowed = fill if has_head else fill | {k for k in missing if k.startswith('head.')}
    problems = [f'{name}: {sorted(keys)[:12]}' for name, keys in (
        ('missing', missing - allowed), ('unexpected', sd.keys() - model_sd.keys()),
        ('mis-shaped', {k for k in sd.keys() & model_sd.keys()
                        if sd[k].shape != model_sd[k].shape})) if keys]
    if problems:
        raise CheckpointError('exported weights do not fit the classifier: '
                              + '; '.join(problems))
    return {**sd, **_init_values(model, missing & fill)}


def unused_output_norms(family: str, backbone_keys: Iterable[str], last: int) -> list[str]:
    """Dense-only output norms of the stages before ``last``: computed by the
    backbone but not part of the classifier's output."""
    patterns = backbone_class(family).checkpoint_converter().dense_only
    return sorted(f'backbone.{k}' for k in backbone_keys if not k.startswith(f'stages.{last}.')
                  and any(re.search(p, k) for p in patterns))


def _backbone_defaults(backbone_type: str) -> dict:
    from mmengine.registry import MODELS
    params = inspect.signature(MODELS.get(backbone_type).__init__).parameters
    return {'arch': params['arch'].default}


@dataclass
class OfficialClassifier:
    """An official ImageNet checkpoint in the classifier's keys
    (``backbone.*``, ``neck.*``, ``head.fc.*``): what the mmpretrain export
    and the timm models (:mod:`vattn_mm.timm`) load.

    Attributes:
        arch: the backbone's hyper-parameters in the classification settings.
        backbone_kwargs: its constructor arguments besides ``arch``.
        weights: the checkpoint's tensors under the classifier's keys.
        neck: the registered neck's config where the official head is more
            than pooling and a linear layer (EfficientViT), else None.
        width: channels the linear layer takes.
        num_classes: classes of the checkpoint's head (None: it has none).
        dense_only: ``backbone.*`` keys no ImageNet checkpoint has (they keep
            their initialisation).
        notes: what the conversion did to values.
    """

    arch: Arch
    backbone_kwargs: dict
    weights: StateDict
    neck: Optional[dict]
    width: int
    num_classes: Optional[int]
    dense_only: set[str]
    notes: list[str]


def official_classifier(obj: dict, family: str, arch: Arch, src: str) -> OfficialClassifier:
    """The official ImageNet checkpoint ``obj`` (read from ``src``) ->
    classifier weights computing the official logits (backbone in the
    classification settings of ``family``)."""
    cls = backbone_class(family, released=True)
    sd = official_state_dict(obj, family)
    arch_updates, kwargs = cls.imagenet_settings(arch, sd)
    if arch_updates:
        arch = {**cls.parse_arch(arch)[1], **arch_updates}
    backbone = build_backbone(family, arch, device='meta', **kwargs)
    last = backbone.num_stages - 1
    conv = official_to_vattn(sd, family, arch, **kwargs)
    extra = dict(conv.official_only)
    weights = {f'backbone.{k}': v for k, v in conv.state_dict.items()}
    if cls.classifier_norm is not None:
        for name in ('weight', 'bias'):
            key = cls.classifier_norm + name
            if key not in extra:
                raise CheckpointError(f'{src!r} has no classifier norm {key!r}')
            weights[f'backbone.stages.{last}.norm.{name}'] = extra.pop(key)
    renamed = {k: cls.classifier_head_keys.to_ours(k) for k in extra}
    weights.update({new: extra.pop(k) for k, new in renamed.items() if new != k})
    neck, width = None, backbone.out_channels[-1]
    if any(k.startswith('neck.') for k in weights):   # a classifier neck (EfficientViT's ClsHead)
        neck = backbone.imagenet_neck()
        width = neck['widths'][-1]
    if extra:
        raise CheckpointError(f'{src!r}: official keys with no place in the classifier: '
                              f'{sorted(extra)[:12]}')
    head = weights.get('head.fc.weight')
    return OfficialClassifier(arch, kwargs, weights, neck, width,
                              None if head is None else head.shape[0],
                              {f'backbone.{k}' for k in conv.dense_only}, conv.notes)


def export_official(src: str, family: str, arch: Arch,
                    num_classes: Optional[int] = None) -> ClassifierExport:
    """An official ImageNet checkpoint -> classifier computing the official
    logits (:func:`official_classifier`)."""
    found = official_classifier(read_checkpoint(src), family, arch, src)
    has_head = found.num_classes is not None
    if has_head:
        if num_classes not in (None, found.num_classes):
            raise ValueError(f'{src!r} has a {found.num_classes}-class head, '
                             f'not {num_classes} classes')
        num_classes = found.num_classes
    backbone = build_backbone(family, found.arch, device='meta', **found.backbone_kwargs)
    last = backbone.num_stages - 1
    model = classifier_model(
        dict(type=type(backbone).__name__, arch=found.arch, out_indices=(last, ),
             **found.backbone_kwargs), found.width, num_classes or 1000, found.neck)
    return ClassifierExport(model, num_classes or 1000,
                            complete_state_dict(model, found.weights, found.dense_only, has_head),
                            f'official {family} checkpoint {osp.basename(src)}', has_head,
                            found.notes, unused_output_norms(family, backbone.state_dict(), last))


def export_trained(src: str, config: str, num_classes: int = 1000) -> ClassifierExport:
    """A vattn-mm detector / segmentor checkpoint + its config -> classifier
    with the same backbone weights (the linear head starts untrained)."""
    from mmengine.config import Config
    cfg = Config.fromfile(config)
    backbone_cfg = cfg.get('model', {}).get('backbone')
    if backbone_cfg is None:
        raise ValueError(f'{config!r} has no model.backbone')
    backbone_cfg = {k: v for k, v in backbone_cfg.to_dict().items()
                    if k not in _DENSE_ONLY_ARGS}
    family = backbone_class(backbone_cfg['type']).family()
    backbone_cfg = {**_backbone_defaults(backbone_cfg['type']), **backbone_cfg}
    kwargs = {k: v for k, v in backbone_cfg.items() if k not in ('type', 'arch', 'out_indices')}
    backbone = build_backbone(family, backbone_cfg['arch'], device='meta', **kwargs)
    last = backbone.num_stages - 1
    backbone_cfg['out_indices'] = (last, )
    sd = extract_state_dict(read_checkpoint(src), prefix='backbone.')
    ours, report = match_backbone(sd, family, backbone_cfg['arch'], False, **kwargs)
    weights = {f'backbone.{k}': ours[k] for k in report.loaded}
    model = classifier_model(backbone_cfg, backbone.out_channels[-1], num_classes)
    fill = {f'backbone.{k}' for k in report.dense_only}
    return ClassifierExport(model, num_classes,
                            complete_state_dict(model, weights, fill, has_head=False),
                            f'vattn-mm checkpoint {osp.basename(src)} (config '
                            f'{osp.basename(config)})', False, report.notes,
                            unused_output_norms(family, backbone.state_dict(), last))


# ----------------------------------------------------------------- writing
def config_text(export: ClassifierExport) -> str:
    """The mmpretrain config file of ``export`` (mmengine's ``pretty_text``
    under a comment naming the source)."""
    from mmengine.config import Config
    evaluator = dict(type='Accuracy', topk=export.model['head']['topk'])
    entries = dict(
        _base_=list(CLS_BASES),
        custom_imports=dict(imports=['vattn_mm'], allow_failed_imports=False),
        data_preprocessor=dict(num_classes=export.num_classes),
        model=export.model,
        val_evaluator=evaluator,
        test_evaluator=evaluator)
    header = ['# mmpretrain ImageClassifier exported by tools/export_to_mmpretrain.py from the',
              f'# {export.source}' + ('' if export.has_head else
                                        ' (no ImageNet head: the linear head is untrained)')]
    if export.unused:
        header.append("# find_unused_parameters: the earlier stages' output norms are unused")
        entries['find_unused_parameters'] = True
    return '\n'.join(header) + '\n' + Config(entries).pretty_text.rstrip('\n') + '\n'


def write_export(export: ClassifierExport, out_dir: str, name: str,
                 overwrite: bool = False, source: Optional[str] = None) -> tuple[str, str]:
    """Write ``<out_dir>/<name>.py`` and ``<name>.pth`` atomically; returns
    their paths."""
    meta: dict[str, Any] = dict(vattn_mm=dict(exported_from=export.source, notes=export.notes))
    if export.has_head and export.num_classes == 1000:
        from mmpretrain.datasets.categories import IMAGENET_CATEGORIES
        meta['dataset_meta'] = dict(classes=list(IMAGENET_CATEGORIES))
    cfg_path = osp.join(out_dir, f'{name}.py')
    ckpt_path = osp.join(out_dir, f'{name}.pth')
    for path in (cfg_path, ckpt_path):  # before writing either
        check_output(path, source, overwrite)
    save_text(config_text(export), cfg_path, source, overwrite)
    save_checkpoint({'state_dict': export.state_dict, 'meta': meta}, ckpt_path, source,
                    overwrite)
    return osp.abspath(cfg_path), osp.abspath(ckpt_path)

"""The vattn-mm backbones as timm models (opt-in: ``import vattn_mm.timm``).

Importing this module registers one timm entrypoint per released variant,
``vattn_<family>_<arch>``, with a pretrained tag per release
(``vattn_pvtv2_b2.in1k``, ``vattn_litv2_b.in1k_384``); the prefix keeps clear
of timm's own names.  The model is the same backbone class that OpenMMLab
configs build, inside :class:`PyramidClassifier` (timm's model API), so::

    model = timm.create_model('vattn_focalnet_tiny_srf.in1k', pretrained=True)
    features = timm.create_model('vattn_p2t_small', features_only=True,
                                 out_indices=(1, 2, 3))

``features_only`` gives exactly the maps the MMEngine backbone gives for the
same weights and input (its output norms included, odd sizes padded once and
cropped); the classifier holds no output norm it does not use.  Keyword
arguments reach the backbone: ``arch=dict(...)`` (a custom variant),
``drop_path_rate``, ``out_norm_cfg`` and the family's own options.

``pretrained=True`` reads the official release through vattn-mm's loader
(download with length and sha256 checks, weights-only unpickling, the
family's key map, strict matching that names misfit keys), from the
release's URL, from ``pretrained_cfg_overlay=dict(file=...)`` or from
``pretrained_cfg_overlay=dict(url=...)``.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Optional, Sequence, Union

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import ClassifierHead
from timm.models import build_model_with_cfg, generate_default_cfgs
from timm.models import register_model, resolve_pretrained_cfg
from timm.models._features import feature_take_indices
from torch import nn

from .backbones import LoadReport, backbone_class, build_backbone, read_checkpoint
from .backbones import load_pretrained as load_backbone
from .backbones.loading import load_matched
from .backbones.stage import init_transformer_weights
from .checkpoint.export import official_classifier
from .checkpoint.released import ReleasedWeights, released_weights
from .layers import build_layer

__all__ = ['PyramidClassifier', 'MODEL_PREFIX', 'model_names']

#: prefix of every vattn-mm timm model name (timm has no model of that name)
MODEL_PREFIX = 'vattn_'
#: parameters a timm optimizer leaves without weight decay (position tables)
NO_WEIGHT_DECAY = ('pos_embed', 'relative_position_bias_table', 'rel_pos_h', 'rel_pos_w')


class PyramidClassifier(nn.Module):
    """A vattn-mm backbone with timm's classifier API.

    ``backbone`` is the registered backbone class of ``family`` in its
    ImageNet settings (:meth:`~vattn_mm.backbones.PyramidBackbone.imagenet_settings`),
    ``neck`` the official classifier's layers between the last map and the
    linear layer where it has any (EfficientViT), ``head`` timm's
    :class:`~timm.layers.ClassifierHead` (pooling, dropout, ``head.fc``):
    the keys of the mmpretrain export (``tools/export_to_mmpretrain.py``).

    Args:
        family: a released family (``'pvtv2'``).
        arch: an ``arch_zoo`` name or a dict of official hyper-parameters.
        num_classes: classes of the linear layer (0: none, pooled features).
        global_pool: ``'avg'`` (the official classifiers), timm's other pool
            types, or ``''`` (the last map, unpooled).
        in_chans: input channels.
        drop_rate: dropout before the linear layer.
        features: the stages a features model (``features_only``) gives:
            its backbone is the one OpenMMLab configs build (the dense
            settings, every output norm of these stages) and loads a release
            as they do; a classifier (empty) has the release's ImageNet
            settings and only the output norms it uses.
        device, dtype: where and in which type the parameters are made.
        **backbone_kwargs: the backbone's own arguments (``drop_path_rate``,
            ``with_cp``, ``fast_paths``, family options).
    """

    def __init__(self, family: str, arch: Union[str, dict], num_classes: int = 1000,
                 global_pool: str = 'avg', in_chans: int = 3, drop_rate: float = 0.,
                 features: Sequence[int] = (), device=None, dtype=None, **backbone_kwargs):
        super().__init__()
        if 'in_channels' in backbone_kwargs:
            raise TypeError("PyramidClassifier: give the input channels as in_chans, "
                            "timm's name")
        if in_chans != 3:
            backbone_kwargs['in_channels'] = in_chans
        cls = backbone_class(family, released=True)
        self.features = tuple(features)
        device = device or torch.empty(0).device   # the default device (a device context)
        with torch.device(device):
            self.backbone = build_backbone(family, arch, imagenet=not self.features,
                                           device=device, **backbone_kwargs)
            last = self.backbone.num_stages - 1
            self.backbone.out_indices = self.features or (last, )
            if not cls.norm_feeds_next:   # output norms only a dense head reads
                for i, stage in enumerate(self.backbone.stages[:last]):
                    if i not in features:
                        stage.norm = nn.Identity()
            neck = None if self.features else self.backbone.imagenet_neck()
            self.neck = None if neck is None else build_layer(neck, 'neck')
            self.in_chans = in_chans
            self.num_classes = num_classes
            self.global_pool = global_pool
            self.drop_rate = drop_rate
            self.num_features = self.backbone.out_channels[-1]
            self.head_hidden_size = self.num_features if self.neck is None \
                else self.neck.out_channels
            self.head = self._classifier_head(num_classes, global_pool)
            self.apply(init_transformer_weights)
        if dtype is not None:
            self.to(dtype=dtype)
        self.feature_info = [
            dict(num_chs=c, reduction=s, module=f'backbone.stages.{i}')
            for i, (c, s) in enumerate(zip(self.backbone.out_channels, self.backbone.strides))]

    def _classifier_head(self, num_classes: int, global_pool: str) -> ClassifierHead:
        # a neck pools itself (EfficientViT): the head is the linear layer only
        pool = '' if self.neck is not None else global_pool
        return ClassifierHead(self.head_hidden_size, num_classes, pool_type=pool,
                              drop_rate=self.drop_rate)

    # ------------------------------------------------------------ timm API
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        """A new linear layer of ``num_classes`` (0: none) and, if given, pooling
        (``''``: the unpooled last map; for a model with a neck, without it)."""
        if global_pool is not None:
            self.global_pool = global_pool
        self.num_classes = num_classes
        like = next(self.parameters())
        with torch.device(like.device):
            head = self._classifier_head(num_classes, self.global_pool)
        self.head = head.to(dtype=like.dtype).train(self.training)

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        self.backbone.with_cp = enable

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        stages = r'^backbone\.stages\.(\d+)'
        return dict(stem=r'^backbone\.stages\.0\.patch_embed',
                    blocks=stages if coarse else [
                        (stages + r'\.patch_embed', (0, )),
                        (stages + r'\.blocks\.(\d+)', None),
                        (stages, (99999, )),
                        (r'^neck', (99999, ))])

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {name for name, _ in self.named_parameters()
                if name.rsplit('.', 1)[-1] in NO_WEIGHT_DECAY}

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's normalised map (NCHW)."""
        return self.backbone.forward_stages(x, (len(self.backbone.stages) - 1, ))[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.neck is not None and self.global_pool:
            x = self.neck(x)
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(self, x: torch.Tensor,
                              indices: Optional[Union[int, Sequence[int]]] = None,
                              norm: bool = False, stop_early: bool = False,
                              output_fmt: str = 'NCHW', intermediates_only: bool = False):
        """Stage maps (NCHW) of ``indices`` (timm's meaning: None all, ``n``
        the last n), and unless ``intermediates_only`` the final map
        (:meth:`forward_features`) first.  A stage's map carries its output
        norm where the model holds one (a features model: those the MMEngine
        backbone applies)."""
        if output_fmt != 'NCHW':
            raise ValueError(f'{type(self).__name__}: output_fmt {output_fmt!r}; only NCHW')
        take, _ = feature_take_indices(len(self.backbone.stages), indices)
        if intermediates_only:
            return list(self.backbone.forward_stages(x, take))
        last = len(self.backbone.stages) - 1
        wanted = sorted(set(take) | {last})
        maps = dict(zip(wanted, self.backbone.forward_stages(x, wanted)))
        return maps[last], [maps[i] for i in take]

    def prune_intermediate_layers(self, indices: Union[int, Sequence[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True) -> list[int]:
        """Drop the stages after the last of ``indices`` and (``prune_head``)
        the neck and classifier; returns the indices taken."""
        take, max_index = feature_take_indices(len(self.backbone.stages), indices)
        self.backbone.stages = self.backbone.stages[:max_index + 1]
        self.backbone.out_indices = tuple(take)
        self.feature_info = self.feature_info[:max_index + 1]
        if prune_head:
            self.neck = None
            self.num_features = self.head_hidden_size = self.feature_info[-1]['num_chs']
            self.reset_classifier(0, '')
        return take

    # ------------------------------------------------------------ weights
    def load_pretrained(self, source: str) -> LoadReport:
        """Load an official ImageNet release (a file or a URL) strictly.

        A features model loads it as the MMEngine backbone's
        ``init_cfg=dict(type='Pretrained')`` does (dense-only output norms
        keep their initialisation); a classifier takes the release's
        classifier too, as the mmpretrain export does, but a head of another
        width than the release's starts fresh (timm's rule).

        Raises:
            CheckpointMismatchError: naming the misfit keys.
        """
        if self.features:
            return load_backbone(self.backbone, source, self.backbone.checkpoint_converter())
        found = official_classifier(read_checkpoint(source), self.backbone.family(),
                                    self.backbone.arch, source)
        weights = found.weights
        own = self.state_dict()
        head = {k for k in weights if k.startswith('head.')}
        if found.num_classes != self.num_classes or self.num_classes == 0:
            weights = {k: v for k, v in weights.items() if k not in head}
        fresh = {k for k in own if k.startswith('head.')} - weights.keys()
        report = LoadReport.compare(weights, own, 'official',
                                    lambda key: key in found.dense_only or key in fresh)
        load_matched(self, weights, report, source,
                     f'{type(self).__name__} of {type(self.backbone).__name__} '
                     f'({self.backbone.arch_name})', 'Check the model name and the file.')
        return report


# ----------------------------------------------------------- entrypoints
def _variant(record: ReleasedWeights) -> tuple[str, str, str]:
    """``(model name, family, arch)`` of a released ImageNet record."""
    class_name, arch = record.backbone.split(':')
    family = backbone_class(class_name).family()
    return f'{MODEL_PREFIX}{family}_{arch}', family, arch


def _tag(record: ReleasedWeights) -> str:
    """``in1k`` / ``in22k`` and the resolution where it is not 224."""
    dataset = re.search(r'in\d+k$', record.name).group(0)
    return dataset if record.resolution in (None, 224) else f'{dataset}_{record.resolution}'


def _first_conv(family: str, arch: str) -> str:
    embed = build_backbone(family, arch, device='meta').stages[0].patch_embed
    name = next(n for n, m in embed.named_modules() if isinstance(m, nn.Conv2d))
    return f'backbone.stages.0.patch_embed.{name}'


def _pretrained_cfg(record: ReleasedWeights, first_conv: str) -> dict:
    size = record.resolution or 224
    direct = record.download == 'direct'
    how = {'manual': f'a manual download ({record.file}) from {record.weights}',
           'unpublished': 'not published'}.get(record.download)
    return dict(
        url=record.weights if direct else '', num_classes=21842 if '22k' in record.name else 1000,
        input_size=(3, size, size), pool_size=(size // 32, size // 32),
        crop_pct=0.9 if size == 224 else 1.0, interpolation='bicubic',
        mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, first_conv=first_conv,
        classifier='head.fc', origin_url=record.source,
        notes=() if direct else (f'official weights: {how}; load a local copy with '
                                 "pretrained_cfg_overlay=dict(file='...')", ))


def _create(name: str, family: str, variant_arch: str, pretrained: bool = False,
            **kwargs: Any) -> nn.Module:
    out_indices = kwargs.pop('out_indices', 4)
    arch = kwargs.pop('arch', variant_arch)
    if kwargs.get('features_only'):
        cls = backbone_class(family)
        stages = cls.stage_count(cls.parse_arch(arch)[1])
        kwargs['features'] = tuple(feature_take_indices(stages, out_indices)[0])
    if pretrained:
        cfg = resolve_pretrained_cfg(name, pretrained_cfg=kwargs.pop('pretrained_cfg', None),
                                     pretrained_cfg_overlay=kwargs.pop('pretrained_cfg_overlay',
                                                                       None))
        source = cfg.file or cfg.url
        if not source:
            raise RuntimeError(f'{cfg.architecture}.{cfg.tag}: no download for pretrained=True; '
                               + ' '.join(cfg.notes or ()))
        # vattn-mm's loader reads files and URLs alike: timm hands it the source
        kwargs['pretrained_cfg'] = cfg
        kwargs['pretrained_cfg_overlay'] = dict(file=source, custom_load=True)
    return build_model_with_cfg(
        PyramidClassifier, name, pretrained, family=family, arch=arch,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'), **kwargs)


def _entrypoint(name: str, family: str, arch: str):
    def create(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        return _create(name, family, arch, pretrained, **kwargs)

    create.__name__ = create.__qualname__ = name
    create.__module__ = __name__
    create.__doc__ = f'{name}: the vattn-mm {family} backbone, arch {arch!r}.'
    return create


def _releases() -> tuple[dict[str, tuple[str, str]], dict[str, dict]]:
    """``({model name: (family, arch)}, {name.tag: pretrained cfg})`` of the
    released ImageNet checkpoints in the model index."""
    variants: dict[str, tuple[str, str]] = {}
    cfgs: dict[str, dict] = {}
    first_convs: dict[str, str] = {}
    for record in released_weights(pretraining=True):
        name, family, arch = _variant(record)
        variants.setdefault(name, (family, arch))
        if family not in first_convs:
            first_convs[family] = _first_conv(family, arch)
        cfgs[f'{name}.{_tag(record)}'] = _pretrained_cfg(record, first_convs[family])
    return variants, cfgs


_VARIANTS, _CFGS = _releases()
#: what timm's ``register_model`` reads: the pretrained cfgs by ``name.tag``
default_cfgs = generate_default_cfgs(_CFGS)
for _name, (_family, _arch) in _VARIANTS.items():
    register_model(_entrypoint(_name, _family, _arch))


def model_names() -> list[str]:
    """The registered vattn-mm timm models (without tags)."""
    return sorted(_VARIANTS)

"""What the analysis tools measure: a registered backbone (``'PVTv2:b2'``) or a
whole mmdet / mmseg / mmpretrain model from a config file."""
from __future__ import annotations

import os.path as osp
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import MODELS, DefaultScope
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ..backbones import PyramidBackbone, TokenPyramid, build_backbone, registered_backbones
from ..engine.distributed import replace_sync_bn
from ..layers import MIXERS
from .complexity import Complexity, count_complexity


@dataclass
class Target:
    """A model and how to run it on a batch of images ``(B, 3, H, W)``;
    ``parts``: named groups of submodules whose own forward peak memory is
    reported too (the largest over a group's modules, e.g. the token mixers)."""

    name: str
    model: nn.Module
    forward: Callable[[torch.Tensor], Any]
    parts: dict[str, list[nn.Module]] = field(default_factory=dict)


class ImageNetClassifier(nn.Module):
    """Backbone -> last stage map -> global average pool (or the family's
    classifier neck, :meth:`PyramidBackbone.imagenet_neck`) -> linear head:
    the released ImageNet classification models the papers' tables describe."""

    def __init__(self, backbone: PyramidBackbone, num_classes: int = 1000):
        super().__init__()
        self.backbone = backbone
        neck = backbone.imagenet_neck()
        self.neck = None if neck is None else MODELS.build(neck)
        width = backbone.out_channels[-1] if neck is None else self.neck.out_channels
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = self.backbone(x)[-1]
        return self.head(last.mean((2, 3)) if self.neck is None else self.neck(last))


#: family name of the single-stage mixer specs (``'Mixer:LiteMLA'``)
MIXER_SPEC = 'Mixer'
#: the stage a ``Mixer:`` spec measures: PVTv2-b1's first stage (stride 4,
#: 64 channels, one head, FFN ratio 8), one block
MIXER_STAGE = dict(embed_dims=[64], depths=[1], num_heads=[1], mlp_ratios=[8])


def mixer_stage(name: str, *, with_cp: bool = False,
                device: Union[str, torch.device] = 'cpu') -> TokenPyramid:
    """One stride-4 stage with one block of the token mixer ``name`` (a
    :data:`~vattn_mm.layers.MIXERS` name) at its first-stage defaults
    (:data:`MIXER_STAGE`): how a mixer's cost grows with the number of
    tokens, measured where the maps are largest."""
    if name not in MIXERS:
        raise ValueError(f'unknown mixer {name!r} in {MIXER_SPEC}:{name}; choose one of '
                         f'{sorted(MIXERS)}')
    with torch.device(device):
        return TokenPyramid(MIXER_STAGE, mixer=dict(type=name), drop_path_rate=0.,
                            out_indices=(0, ), with_cp=with_cp)


def is_backbone_spec(spec: str) -> bool:
    """``'Family:arch'`` rather than a config file path."""
    return ':' in spec and not osp.exists(spec)


def build_spec(spec: str, *, imagenet: bool = False, with_cp: bool = False,
               device: Union[str, torch.device] = 'cpu') -> nn.Module:
    """Build ``'Family:arch'`` (e.g. ``'PVTv2:b2'``, ``'FocalNet:tiny_srf'``,
    ``'TokenPyramid:b1'``) or a single mixer stage ``'Mixer:Name'``
    (:func:`mixer_stage`, e.g. ``'Mixer:LiteMLA'``).

    ``imagenet=True``: the released ImageNet classifier instead (ImageNet
    hyper-parameters, 1000-class head on the pooled last stage), the models
    the papers' parameter / FLOP tables describe.
    """
    family, _, arch = spec.partition(':')
    if family == MIXER_SPEC:
        if imagenet:
            raise ValueError(f'{spec}: a mixer stage has no ImageNet classifier')
        return mixer_stage(arch, with_cp=with_cp, device=device)
    families = registered_backbones()
    if family not in families:
        raise ValueError(f'unknown backbone family {family!r} in {spec!r}; choose one of '
                         f'{sorted(families)} (e.g. PVTv2:b2), {MIXER_SPEC}:<mixer> or give a '
                         'config file')
    cls = families[family]
    if arch.lower() not in cls.arch_zoo:
        raise ValueError(f'{family} has no arch {arch!r}; choose one of {sorted(cls.arch_zoo)}')
    kwargs: dict[str, Any] = dict(with_cp=with_cp)
    if imagenet:
        kwargs['out_indices'] = (-1, )
    backbone = build_backbone(family, arch, imagenet=imagenet, device=device, **kwargs)
    if imagenet:
        with torch.device(device):
            return ImageNetClassifier(backbone)
    return backbone


def strip_pretrained(node: Any) -> Any:
    """Drop ``init_cfg=dict(type='Pretrained', ...)`` entries (no checkpoint
    files are needed to measure a model)."""
    if isinstance(node, dict):
        if node.get('type') == 'Pretrained':
            return None
        return {k: strip_pretrained(v) for k, v in node.items()}
    if isinstance(node, list):
        return [strip_pretrained(v) for v in node]
    return node


def _data_samples(scope: str, hw: tuple[int, int]) -> Optional[list]:
    """What the model's ``mode='tensor'`` forward needs besides the images."""
    if scope != 'mmdet':
        return None
    from mmdet.structures import DetDataSample
    return [DetDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, pad_shape=hw,
                                        batch_input_shape=hw, scale_factor=(1., 1.)))]


def build_config_model(path: str, *, with_cp: bool = False,
                       device: Union[str, torch.device] = 'cpu') -> Target:
    """The whole model of an mmdet / mmseg / mmpretrain config, run in
    ``mode='tensor'``: the inference path (backbone, neck and heads; for
    two-stage detectors the RoI heads on the RPN proposals, as mmdet's own
    ``get_flops``; training-only parts like mmseg's auxiliary heads do not
    run).  Pretrained checkpoints are not loaded; SyncBN becomes BN; the data
    preprocessor is skipped (the input is the normalised batch)."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'config file not found: {path}')
    cfg = Config.fromfile(path)
    if 'model' not in cfg:
        raise ValueError(f'{path} has no `model` entry')
    scope = cfg.get('default_scope', 'mmdet')
    model_cfg = strip_pretrained(cfg.model.to_dict())
    model_cfg.pop('pretrained', None)
    replace_sync_bn(model_cfg)
    if with_cp:
        model_cfg['backbone']['with_cp'] = True
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(ConfigDict(model_cfg)).to(device)

    def forward(images: torch.Tensor) -> Any:
        samples = _data_samples(scope, tuple(images.shape[-2:]))
        with DefaultScope.overwrite_default_scope(scope):
            return model(images, samples, mode='tensor')
    return Target(osp.splitext(osp.basename(path))[0], model, forward)


def build_target(spec: str, *, imagenet: bool = False, with_cp: bool = False,
                 device: Union[str, torch.device] = 'cpu') -> Target:
    """A backbone spec (``'PVTv2:b2'``) or a config path, see
    :func:`build_spec` and :func:`build_config_model`."""
    if is_backbone_spec(spec):
        model = build_spec(spec, imagenet=imagenet, with_cp=with_cp, device=device)
        return Target(spec, model, model)
    if imagenet:
        raise ValueError('imagenet=True (--imagenet) applies to backbone specs '
                         '(Family:arch), not configs')
    if not osp.isfile(spec):
        raise FileNotFoundError(f'{spec!r} is neither a config file nor a backbone spec '
                                f'Family:arch with Family in {sorted(registered_backbones())}')
    return build_config_model(spec, with_cp=with_cp, device=device)


def model_complexity(target: Target, shape: tuple[int, int]) -> Complexity:
    """:func:`.count_complexity` of ``target`` on one ``3 x H x W`` image
    (on the model's device)."""
    device = next(target.model.parameters()).device
    images = torch.randn(1, 3, *shape, device=device)
    target.model.eval()
    return count_complexity(target.model, lambda: target.forward(images))


def spec_complexity(spec: str, shape: tuple[int, int], *, imagenet: bool = False) -> Complexity:
    """Complexity of a backbone spec or config at ``shape`` (H, W).

    Backbones are built and run under :class:`FakeTensorMode` (CPU tensors
    without storage: shape-exact, no memory, no arithmetic); configs run once
    on the CPU (detectors select their proposals by value).
    """
    if is_backbone_spec(spec):
        with FakeTensorMode():
            return model_complexity(build_target(spec, imagenet=imagenet), shape)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return model_complexity(build_target(spec, imagenet=imagenet), shape)

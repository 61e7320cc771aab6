"""Norm and activation layers from configs, and stochastic depth, with torch
alone.

The config names are mmcv's (``dict(type='LN')``, ``'SyncBN'``, ``'GELU'``,
``'HSwish'``) and so are the modules built: the torch classes mmcv
registers under those names, with mmcv's defaults (``eps=1e-5``, a
``requires_grad`` key).  A type outside these tables (one a codebase
registers in MMEngine's ``MODELS``) is built by mmcv where it is installed.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

#: norm types mmcv names -> the torch class it builds
NORMS = {
    'BN': nn.BatchNorm2d, 'BN1d': nn.BatchNorm1d, 'BN2d': nn.BatchNorm2d, 'BN3d': nn.BatchNorm3d,
    'SyncBN': nn.SyncBatchNorm, 'GN': nn.GroupNorm, 'LN': nn.LayerNorm,
    'IN': nn.InstanceNorm2d, 'IN1d': nn.InstanceNorm1d, 'IN2d': nn.InstanceNorm2d,
    'IN3d': nn.InstanceNorm3d,
}
#: activation types mmcv names -> the torch class it builds
ACTIVATIONS = {
    'ReLU': nn.ReLU, 'ReLU6': nn.ReLU6, 'LeakyReLU': nn.LeakyReLU, 'PReLU': nn.PReLU,
    'RReLU': nn.RReLU, 'ELU': nn.ELU, 'GELU': nn.GELU, 'SiLU': nn.SiLU, 'HSwish': nn.Hardswish,
    'Sigmoid': nn.Sigmoid, 'Tanh': nn.Tanh,
}


def _mmcv_builder(name: str, kind: Any, role: str, known: Mapping[str, type]):
    try:
        from mmcv import cnn
    except ImportError:
        raise KeyError(f'{role} type {kind!r} is not one of {sorted(known)}; other types are '
                       'built by mmcv, which is not installed') from None
    return getattr(cnn, name)


def build_norm(cfg: Mapping[str, Any], num_features: int) -> nn.Module:
    """The norm layer of ``cfg`` over ``num_features`` channels."""
    cfg = dict(cfg)
    kind = cfg.pop('type')
    cls = kind if isinstance(kind, type) else NORMS.get(kind)
    if cls is None:
        build = _mmcv_builder('build_norm_layer', kind, 'norm', NORMS)
        return build(dict(cfg, type=kind), num_features)[1]
    requires_grad = cfg.pop('requires_grad', True)
    cfg.setdefault('eps', 1e-5)
    if cls is nn.GroupNorm:
        if 'num_groups' not in cfg:
            raise ValueError(f'norm config {dict(cfg, type=kind)}: GN needs num_groups')
        layer = cls(num_channels=num_features, **cfg)
    else:
        layer = cls(num_features, **cfg)
    for param in layer.parameters():
        param.requires_grad = requires_grad
    return layer


def build_activation(cfg: Mapping[str, Any]) -> nn.Module:
    """The activation layer of ``cfg``."""
    cfg = dict(cfg)
    kind = cfg.pop('type')
    cls = kind if isinstance(kind, type) else ACTIVATIONS.get(kind)
    if cls is None:
        build = _mmcv_builder('build_activation_layer', kind, 'activation', ACTIVATIONS)
        return build(dict(cfg, type=kind))
    return cls(**cfg)


class DropPath(nn.Module):
    """Stochastic depth: in training, zero a sample's residual branch with
    probability ``drop_prob`` and scale the kept ones by ``1 / (1 - drop_prob)``
    (the same random draw as mmcv's ``DropPath``)."""

    def __init__(self, drop_prob: float = 0.1):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.drop_prob == 0. or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        keep = (keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)).floor()
        return x.div(keep_prob) * keep

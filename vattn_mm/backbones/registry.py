"""The registered backbones by name: registering, lookups and building
without weights."""
from __future__ import annotations

import sys
from typing import Any, Mapping, Union

import torch

from ..utils.registry import Registry
from .base import PyramidBackbone

#: the backbones registered with :func:`register_backbone` (mirrored into
#: MMEngine's ``MODELS`` where it is installed: :mod:`vattn_mm.utils.registry`)
BACKBONES = Registry('backbone')


def register_backbone(cls: type) -> type:
    """Class decorator: register a :class:`PyramidBackbone` subclass."""
    if not issubclass(cls, PyramidBackbone):
        raise TypeError(f'{cls.__name__} is not a PyramidBackbone')
    return BACKBONES.register(cls)


def registered_backbones() -> dict[str, type]:
    """Every registered vattn-mm backbone class, by registered name: those
    of :data:`BACKBONES`, then PyramidBackbone subclasses registered in
    MMEngine's ``MODELS`` directly where the process uses MMEngine."""
    found = dict(BACKBONES)
    registry = sys.modules.get('mmengine.registry')
    if registry is not None:
        found.update({name: cls for name, cls in registry.MODELS.module_dict.items()
                      if isinstance(cls, type) and issubclass(cls, PyramidBackbone)})
    return found


def released_families() -> dict[str, type]:
    """The backbones with official releases to convert (a ``converter``), by
    family name (``'pvtv2'``)."""
    return {cls.family(): cls for cls in registered_backbones().values()
            if cls.converter is not None}


def backbone_class(name: str, released: bool = False) -> type:
    """The backbone class of a family or class name, case-insensitive
    (``'pvtv2'``, ``'PVTv2'``, ``'agent_pvt'``, ``'AgentPVT'``); with
    ``released``, only among the families with official releases
    (:func:`released_families`)."""
    classes = {n: cls for n, cls in registered_backbones().items()
               if not released or cls.converter is not None}
    names = {cls.family(): cls for cls in classes.values()}
    names.update({n.lower(): cls for n, cls in classes.items()})
    found = names.get(name.lower())
    if found is None:
        raise ValueError(f'unknown {"released " if released else ""}backbone family {name!r}; '
                         f'choose one of {sorted(cls.family() for cls in classes.values())}')
    return found


def build_backbone(name: str, arch: Union[str, Mapping[str, Any]], *, imagenet: bool = False,
                   device: Union[str, torch.device] = 'cpu', **kwargs) -> PyramidBackbone:
    """Build a backbone (``name``: family or class name) without loading
    weights, on ``device`` (``'meta'``: no memory).

    ``imagenet=True``: with the hyper-parameters of the released ImageNet
    model where the dense defaults differ (:meth:`PyramidBackbone.imagenet_settings`).
    """
    cls = backbone_class(name)
    if imagenet:
        updates, extra = cls.imagenet_settings(arch)
        if updates:
            arch = {**cls.parse_arch(arch)[1], **updates}
        kwargs = {**extra, **kwargs}
    with torch.device(device):
        return cls(arch=arch, **kwargs)

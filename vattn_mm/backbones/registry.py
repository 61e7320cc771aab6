"""The registered backbones by name: lookups and building without weights."""
from __future__ import annotations

from typing import Any, Mapping, Union

import torch

from .base import PyramidBackbone


def registered_backbones() -> dict[str, type]:
    """Every registered vattn-mm backbone class, by registered name."""
    from mmengine.registry import MODELS
    return {name: cls for name, cls in MODELS.module_dict.items()
            if isinstance(cls, type) and issubclass(cls, PyramidBackbone)}


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

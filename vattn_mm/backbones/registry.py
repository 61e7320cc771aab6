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


def backbone_class(name: str) -> type:
    """The backbone class of a family or class name, case-insensitive
    (``'pvtv2'``, ``'PVTv2'``, ``'agent_pvt'``, ``'AgentPVT'``)."""
    classes = registered_backbones()
    names = {cls.family(): cls for cls in classes.values()}
    names.update({n.lower(): cls for n, cls in classes.items()})
    found = names.get(name.lower())
    if found is None:
        raise ValueError(f'unknown backbone {name!r}; choose one of {sorted(classes)}')
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

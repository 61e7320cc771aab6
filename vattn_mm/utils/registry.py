"""The registries of the model code, torch only, mirrored into MMEngine.

Layers and backbones register in a :class:`Registry` of their own, so the
model code imports torch alone (:mod:`vattn_mm.timm` builds it without
OpenMMLab).  Where MMEngine is installed, ``import vattn_mm`` calls
:func:`mirror_into_mmengine` first: every class registered here, before or
after, is then registered in MMEngine's root ``MODELS`` too, which mmdet,
mmseg and mmpretrain configs build from.
"""
from __future__ import annotations

from typing import Callable, Optional

#: called with every class any registry registers (the MMEngine mirror)
_MIRRORS: list[Callable[[type], None]] = []
#: every registry, in the order made
_REGISTRIES: list['Registry'] = []


class Registry(dict):
    """Classes by their names (``cls.__name__``)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        _REGISTRIES.append(self)

    def register(self, cls: type) -> type:
        """Class decorator: register ``cls`` under its name."""
        name = cls.__name__
        if self.get(name, cls) is not cls:
            raise KeyError(f'{self.kind} {name!r} is already registered '
                           f'({self[name].__module__}.{name}); give the new class another name')
        self[name] = cls
        for mirror in _MIRRORS:
            mirror(cls)
        return cls


def mmengine_models() -> Optional[object]:
    """MMEngine's root ``MODELS`` registry where MMEngine is installed, else None."""
    try:
        from mmengine.registry import MODELS
    except ImportError:
        return None
    return MODELS


def mirror_into_mmengine() -> None:
    """Register every class of every registry in MMEngine's ``MODELS``, now
    and whenever one is registered later (once a process)."""
    models = mmengine_models()
    if models is None or _MIRRORS:
        return

    def register(cls: type) -> None:
        models.register_module(module=cls)

    _MIRRORS.append(register)
    for registry in _REGISTRIES:
        for cls in registry.values():
            register(cls)

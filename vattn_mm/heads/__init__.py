"""Registered decode heads that compose vattn-mm layers; usable with any
backbone (they need only its channel counts).

``EAHead`` subclasses mmseg's ``BaseDecodeHead``: its name is registered in
MMEngine's root ``MODELS`` here, and its module (which imports
``mmseg.models``) is imported when a config builds it or when
``vattn_mm.heads.EAHead`` is first read, so ``import vattn_mm`` needs no
mmseg.
"""
from mmengine.registry import MODELS

from ..utils.requires import require

__all__ = ['EAHead']


def _ea_head_class() -> type:
    require('mmseg.models', 'EAHead')
    from .ea_head import EAHead
    return EAHead


@MODELS.register_module(name='EAHead')
def build_ea_head(**kwargs):
    """Build :class:`~vattn_mm.heads.ea_head.EAHead` (imports mmseg)."""
    return _ea_head_class()(**kwargs)


def __getattr__(name: str):
    if name == 'EAHead':
        return _ea_head_class()
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')

"""vattn-mm: efficient-attention pyramid backbones for OpenMMLab 2.x.

Importing the package (``custom_imports=['vattn_mm']``) registers new names
and changes nothing that exists: every backbone, layer and decode head in
MMEngine's root ``MODELS`` registry, which mmdet, mmseg and mmpretrain all
inherit from (the heads of :mod:`vattn_mm.heads` subclass mmseg's
``BaseDecodeHead``, so importing vattn_mm imports ``mmseg.models``), and the
runner, hooks, transform and file backend of :mod:`vattn_mm.engine` that
configs name to switch vattn-mm's protections on (docs/reliability.md), and its
optimizer-wrapper constructor.
"""
from .version import __version__
from . import backbones, checkpoint, engine, heads, layers  # noqa: F401  (registration)

__all__ = ['__version__', 'backbones', 'checkpoint', 'engine', 'heads', 'layers']

"""vattn-mm: efficient-attention pyramid backbones for OpenMMLab 2.x.

Importing the package (``custom_imports=['vattn_mm']``) registers new names
and changes nothing that exists: every backbone, layer and decode head in
MMEngine's root ``MODELS`` registry, which mmdet, mmseg and mmpretrain all
inherit from, and the runner, hooks, transform and file backend of
:mod:`vattn_mm.engine` that configs name to switch vattn-mm's protections on
(docs/reliability.md), and its optimizer-wrapper constructor.

It needs torch, mmengine and mmcv (with or without compiled ops) and checks
their versions first; mmdet, mmseg and mmpretrain are imported only by what
uses them (:mod:`vattn_mm.utils.requires`).
"""
from .version import __version__
from .utils.requires import check_stack

check_stack()

from . import backbones, checkpoint, engine, heads, layers  # noqa: E402,F401  (registration)

__all__ = ['__version__', 'backbones', 'checkpoint', 'engine', 'heads', 'layers']

"""vattn-mm: efficient-attention pyramid backbones for OpenMMLab 2.x, timm
and Hugging Face.

The model code (:mod:`~vattn_mm.layers`, :mod:`~vattn_mm.backbones`,
:mod:`~vattn_mm.checkpoint`) needs torch alone; :mod:`vattn_mm.timm` makes
the backbones timm models.  Where MMEngine is installed, importing the
package (``custom_imports=['vattn_mm']``) also registers new names in its
registries and changes nothing that exists: every backbone, layer and decode
head in MMEngine's root ``MODELS`` registry, which mmdet, mmseg and
mmpretrain all inherit from, and the runner, hooks, transform and file
backend of :mod:`vattn_mm.engine` that configs name to switch vattn-mm's
protections on (docs/reliability.md), and its optimizer-wrapper constructor.
It then needs mmcv too (with or without compiled ops) and checks the
versions first; mmdet, mmseg and mmpretrain are imported only by what uses
them (:mod:`vattn_mm.utils.requires`).
"""
from .version import __version__
from .utils.registry import mirror_into_mmengine
from .utils.requires import check_openmmlab, check_torch, uses_openmmlab

check_torch()
if uses_openmmlab():
    check_openmmlab()
    mirror_into_mmengine()

from . import backbones, checkpoint, layers  # noqa: E402,F401  (registration)

if uses_openmmlab():
    from . import engine, heads  # noqa: F401  (registration in MMEngine)

__all__ = ['__version__', 'backbones', 'checkpoint', 'layers']

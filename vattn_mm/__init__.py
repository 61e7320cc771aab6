"""vattn-mm: efficient-attention pyramid backbones for OpenMMLab 2.x.

Importing the package registers every backbone and layer in MMEngine's root
``MODELS`` registry, which mmdet, mmseg and mmpretrain all inherit from, and
allow-lists the types OpenMMLab checkpoints hold for safe ``torch.load``
(anything else only for files trusted explicitly), makes mmengine's
checkpoint writes atomic and empty datasets fail clearly
(:func:`vattn_mm.utils.harden_mmengine`).
"""
from .utils import harden_mmengine
from .version import __version__

harden_mmengine()

from . import backbones, checkpoint, layers  # noqa: E402,F401  (registration)

__all__ = ['__version__', 'backbones', 'checkpoint', 'layers']

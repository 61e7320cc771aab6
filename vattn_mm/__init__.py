"""vattn-mm: efficient-attention pyramid backbones for OpenMMLab 2.x.

Importing the package registers every backbone and layer in MMEngine's root
``MODELS`` registry, which mmdet, mmseg and mmpretrain all inherit from, and
allow-lists the types OpenMMLab checkpoints hold for safe ``torch.load``.
"""
from .utils import allow_openmmlab_checkpoints
from .version import __version__

allow_openmmlab_checkpoints()

from . import backbones, checkpoint, layers  # noqa: E402,F401  (registration)

__all__ = ['__version__', 'backbones', 'checkpoint', 'layers']

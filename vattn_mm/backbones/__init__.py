"""Registered pyramid backbones."""
from .base import PyramidBackbone, PyramidStage, drop_path_schedule
from .p2t import P2T
from .pvtv2 import PVTv2

__all__ = ['PyramidBackbone', 'PyramidStage', 'drop_path_schedule', 'PVTv2', 'P2T']

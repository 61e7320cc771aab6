"""Registered pyramid backbones."""
from .base import PyramidBackbone, PyramidStage, drop_path_schedule
from .dilateformer import DilateFormer
from .focalnet import FocalNet
from .litv2 import LITv2
from .p2t import P2T
from .pvtv2 import PVTv2
from .quadtree import QuadTree

__all__ = ['PyramidBackbone', 'PyramidStage', 'drop_path_schedule', 'PVTv2', 'P2T', 'FocalNet',
           'LITv2', 'DilateFormer', 'QuadTree']

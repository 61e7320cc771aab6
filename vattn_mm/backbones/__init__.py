"""Registered pyramid backbones: the generic :class:`TokenPyramid` and the
families with official releases, each carrying its family facts (key map,
release wrapper, ImageNet settings, output channels)."""
from .agent_pvt import AgentPVT
from .base import CheckArchs, PyramidBackbone
from .dilateformer import DilateFormer
from .efficientvit import EfficientViT
from .focalnet import FocalNet
from .keymap import KeyMap
from .litv2 import LITv2
from .loading import (CheckpointError, CheckpointMismatchError, FamilyConverter, LoadReport,
                      extract_state_dict, load_pretrained, read_checkpoint)
from .p2t import P2T
from .pvtv2 import PVTv2
from .quadtree import QuadTree
from .registry import (BACKBONES, backbone_class, build_backbone, register_backbone,
                       registered_backbones, released_families)
from .stage import PyramidStage, StageSpec, build_stage, drop_path_schedule
from .token_pyramid import TokenPyramid

__all__ = [
    'BACKBONES', 'CheckArchs', 'PyramidBackbone', 'PyramidStage', 'StageSpec', 'backbone_class',
    'register_backbone',
    'build_backbone', 'build_stage', 'drop_path_schedule', 'registered_backbones',
    'released_families',
    'TokenPyramid', 'PVTv2', 'P2T', 'QuadTree', 'FocalNet', 'LITv2', 'DilateFormer', 'AgentPVT',
    'EfficientViT',
    'KeyMap', 'CheckpointError', 'CheckpointMismatchError', 'FamilyConverter', 'LoadReport',
    'extract_state_dict', 'load_pretrained', 'read_checkpoint',
]

"""Checkpoint reading, strict loading and official <-> vattn-mm key conversion."""
from .keymap import KeyMap
from .loading import (CheckpointError, CheckpointMismatchError,
                      FamilyConverter, LoadReport, extract_state_dict,
                      load_pretrained, read_checkpoint)
from .dilateformer import DILATEFORMER_CONVERTER
from .focalnet import FOCALNET_CONVERTER
from .litv2 import LITV2_CONVERTER
from .p2t import P2T_CONVERTER
from .pvtv2 import PVTV2_CONVERTER
from .quadtree import QUADTREE_CONVERTER
from .convert import CONVERTERS, FamilySpec, get_converter

__all__ = [
    'KeyMap', 'CheckpointError', 'CheckpointMismatchError', 'FamilyConverter',
    'LoadReport', 'extract_state_dict', 'load_pretrained', 'read_checkpoint',
    'PVTV2_CONVERTER',
    'QUADTREE_CONVERTER',
    'P2T_CONVERTER',
    'FOCALNET_CONVERTER',
    'LITV2_CONVERTER',
    'DILATEFORMER_CONVERTER',
    'CONVERTERS', 'FamilySpec', 'get_converter',
]

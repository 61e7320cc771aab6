"""Checkpoint reading, strict loading and official <-> vattn-mm key conversion."""
from .keymap import KeyMap
from .loading import (CheckpointError, CheckpointMismatchError,
                      FamilyConverter, LoadReport, extract_state_dict,
                      load_pretrained, read_checkpoint)
from .p2t import P2T_CONVERTER
from .pvtv2 import PVTV2_CONVERTER

__all__ = [
    'KeyMap', 'CheckpointError', 'CheckpointMismatchError', 'FamilyConverter',
    'LoadReport', 'extract_state_dict', 'load_pretrained', 'read_checkpoint',
    'PVTV2_CONVERTER',
    'P2T_CONVERTER',
]

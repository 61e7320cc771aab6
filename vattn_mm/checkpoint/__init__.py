"""Whole-checkpoint conversion between the official layouts and vattn-mm,
and export to mmpretrain (strict loading itself lives with the backbones)."""
from ..backbones.keymap import KeyMap
from ..backbones.loading import (CheckpointError, CheckpointMismatchError, FamilyConverter,
                                 LoadReport, extract_state_dict, load_pretrained,
                                 read_checkpoint)
from .convert import (DenseConversion, convert_dense_checkpoint, convert_dense_file, get_family,
                      official_dense_state_dict)

__all__ = [
    'KeyMap', 'CheckpointError', 'CheckpointMismatchError', 'FamilyConverter',
    'LoadReport', 'extract_state_dict', 'load_pretrained', 'read_checkpoint', 'get_family',
    'DenseConversion', 'convert_dense_checkpoint', 'convert_dense_file', 'official_dense_state_dict',
]

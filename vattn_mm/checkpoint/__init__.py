"""Whole-checkpoint conversion between the official layouts and vattn-mm,
and export to mmpretrain (strict loading and its errors live with the
backbones: :mod:`vattn_mm.backbones`)."""
from .convert import (DenseConversion, convert_dense_checkpoint, convert_dense_file,
                      official_dense_state_dict)

__all__ = [
    'DenseConversion', 'convert_dense_checkpoint', 'convert_dense_file',
    'official_dense_state_dict',
]

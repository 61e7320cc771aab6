"""Utilities: safe checkpoint loading."""
from .safe_load import allow_openmmlab_checkpoints, openmmlab_safe_globals

__all__ = ['allow_openmmlab_checkpoints', 'openmmlab_safe_globals']

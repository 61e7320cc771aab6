"""Performance machinery: custom autograd functions, fused kernels and
memory-saving schedules, each behind a registered fast path
(:mod:`~vattn_mm.ops.registry`) with the plain PyTorch code as its fallback.
Layers (``vattn_mm.layers``) hold the model math and call in here."""
from .registry import (ENV_VAR, FAST_PATHS, FastPath, Switch, check_setting, configure,
                       describe, register_fast_path, switch)
# the operations register their fast paths when imported
from . import deform_conv, dilated_attention, quadtree, selection  # noqa: F401

__all__ = ['ENV_VAR', 'FAST_PATHS', 'FastPath', 'Switch', 'check_setting', 'configure',
           'describe', 'register_fast_path', 'switch']

"""Performance machinery: custom autograd functions, fused kernels and
memory-saving schedules, each behind a registered fast path
(:mod:`~vattn_mm.ops.registry`) with the plain PyTorch code as its fallback.

Layers (``vattn_mm.layers``) hold the model math: a layer asks for the switch
of each path it uses once, when built, and keeps it under the path's name
(``self.fused_act = ops.switch('fused_act')``); at run time it calls one
function here, which takes the fast path where the switch and the path's
gate allow and the plain code otherwise.

Everything else lives in the submodules (``vattn_mm.ops.conv``,
``.activations``, ``.recompute``, ``.fused``, ``.ffn``, ``.focal``,
``.gates``, ``.quadtree``, ``.dilated_attention``, ``.deform_conv``,
``.selection``); this package
names the registry and the run-time entry points the layers call.
"""
# the operations register their fast paths when imported
from . import deform_conv, dilated_attention, quadtree, selection  # noqa: F401
from .conv import token_map_conv, token_map_conv_act
from .ffn import in_hidden_groups, token_chunks
from .focal import focal_context
from .fused import linear_act
from .recompute import act_linear, norm_recomputed
from .registry import (ENV_VAR, FAST_PATHS, FastPath, Setting, Switch, check_setting,
                       configure, describe, register_fast_path, switch)

__all__ = [
    'ENV_VAR', 'FAST_PATHS', 'FastPath', 'Setting', 'Switch', 'check_setting', 'configure',
    'describe', 'register_fast_path', 'switch', 'token_map_conv', 'token_map_conv_act', 'linear_act',
    'act_linear', 'norm_recomputed', 'in_hidden_groups', 'token_chunks', 'focal_context',
]

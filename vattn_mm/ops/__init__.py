"""Performance machinery: custom autograd functions, fused kernels and
memory-saving schedules, each behind a registered fast path
(:mod:`~vattn_mm.ops.registry`) with the plain PyTorch code as its fallback.

Layers (``vattn_mm.layers``) hold the model math: a layer asks for the switch
of each path it uses once, when built, and keeps it under the path's name
(``self.fused_act = ops.switch('fused_act')``); at run time it calls one
function here, which takes the fast path where the switch and the gate
(:mod:`~vattn_mm.ops.autograd`: capture, autograd, autocast, dispatch mode,
hooks, in one place) allow and the plain code otherwise.

Every block runs through :mod:`.autograd` (the gate, norm and activation
recompute, inference chunks) and :mod:`.conv` (convolutions over token maps,
the ConvFFN over hidden-channel groups); a mixer's own kernels are in the
module named after it (:mod:`.quadtree`, :mod:`.dilated_attention`,
:mod:`.deform_conv`, :mod:`.focal`); :mod:`.fused` and :mod:`.activations`
hold the fused inference kernels and the activation table.
"""
# the operations register their fast paths when imported
from . import deform_conv, dilated_attention, quadtree  # noqa: F401
from .autograd import (Switch, act_linear, autocast_off, autocast_on, configure, describe,
                       export_paths, is_capturing, is_exporting, norm_recomputed, switch,
                       token_chunks)
from .conv import (ConvFFNParts, DepthwiseConv2d, TokenMapConv2d, conv_ffn_in_hidden_groups,
                   hidden_groups_apply, token_map_conv, token_map_conv_act)
from .focal import focal_context
from .fused import linear_act
from .registry import ENV_VAR, FAST_PATHS, FastPath, Setting, check_setting, register_fast_path

__all__ = [
    'ENV_VAR', 'FAST_PATHS', 'FastPath', 'Setting', 'Switch', 'check_setting', 'configure',
    'describe', 'register_fast_path', 'switch', 'token_map_conv', 'token_map_conv_act',
    'linear_act', 'act_linear', 'norm_recomputed', 'token_chunks', 'focal_context',
    'is_exporting', 'is_capturing', 'export_paths', 'autocast_off', 'autocast_on', 'TokenMapConv2d', 'DepthwiseConv2d',
    'ConvFFNParts', 'hidden_groups_apply', 'conv_ffn_in_hidden_groups',
]

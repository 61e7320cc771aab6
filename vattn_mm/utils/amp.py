"""Mixed precision for mmcv ops.

mmcv 2.1's ``nms``, ``roi_align`` and ``deform_conv2d`` kernels exist for
float32/float64 (and float16 on CUDA) only: under bfloat16 autocast
(``AmpOptimWrapper(dtype='bfloat16')``, GPU or CPU) a two-stage detector stops
with "expected scalar type Float but found BFloat16" and LITv2 with
"deformable_im2col_cpu not implemented for 'BFloat16'".  As torchvision does
for its own ``nms`` and ``roi_align``, such calls run in float32 here and cast
floating outputs back to the input's dtype; float32 and CUDA float16 calls
are unchanged.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import torch

#: (device type, dtype) pairs mmcv's kernels take as they are
NATIVE = {(device, dtype) for device in ('cpu', 'cuda')
          for dtype in (torch.float32, torch.float64)} | {('cuda', torch.float16)}


def _floats(args: tuple) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def float32_unless_native(fn: Callable) -> Callable:
    """Run ``fn`` in float32, autocast off, when one of its floating tensor
    arguments has a dtype outside :data:`NATIVE`; floating outputs get the
    first floating argument's dtype back."""
    if getattr(fn, '_vattn_float32', False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        floats = _floats(args)
        if all((a.device.type, a.dtype) in NATIVE for a in floats):
            return fn(*args, **kwargs)
        with torch.autocast(floats[0].device.type, enabled=False):
            out = fn(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))
        return _cast(out, floats[0].dtype)

    wrapper._vattn_float32 = True
    return wrapper


def use_float32_detection_ops() -> None:
    """Wrap mmcv's ``nms`` and ``roi_align`` with :func:`float32_unless_native`:
    in their modules (what ``batched_nms`` and ``RoIAlign`` call) and as
    re-exported by ``mmcv.ops`` (``from mmcv.ops import nms`` after this)."""
    import mmcv.ops
    for name in ('nms', 'roi_align'):
        # the module, not the function mmcv.ops re-exports under its name
        module = importlib.import_module(f'mmcv.ops.{name}')
        wrapped = float32_unless_native(getattr(module, name))
        setattr(module, name, wrapped)
        setattr(mmcv.ops, name, wrapped)

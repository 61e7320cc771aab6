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
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator

import torch

from .compat import autocast_available
from .requires import has_mmcv_ops

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
        device = floats[0].device.type
        with torch.autocast(device, enabled=False) if autocast_available(device) else nullcontext():
            out = fn(*_cast(args, torch.float32), **_cast(kwargs, torch.float32))
        return _cast(out, floats[0].dtype)

    wrapper._vattn_float32 = True
    return wrapper


@contextmanager
def float32_mmcv_ops() -> Iterator[None]:
    """Within the block, mmcv's ``nms`` and ``roi_align`` run through
    :func:`float32_unless_native`; on leaving it they are mmcv's own again.

    mmdet finds these functions by name at call time (``batched_nms`` looks
    up ``nms`` in ``mmcv.ops.nms``, ``RoIAlign`` calls ``roi_align`` of
    ``mmcv.ops.roi_align``), so no config entry can hand it other ones: the
    module attributes are replaced for the duration of the block.  It is
    process-wide while it lasts; :class:`~vattn_mm.engine.SafeRunner` opens it
    around a run when the config says ``float32_mmcv_ops = True``.  With mmcv
    built without its compiled ops (mmcv-lite) no model can call them, and the
    block changes nothing.
    """
    if not has_mmcv_ops():
        yield
        return
    import mmcv.ops
    originals = []
    for name in ('nms', 'roi_align'):
        module = importlib.import_module(f'mmcv.ops.{name}')  # not mmcv.ops.<name>, the function
        originals += [(owner, name, getattr(owner, name)) for owner in (module, mmcv.ops)]
    try:
        for owner, name, fn in originals:
            setattr(owner, name, float32_unless_native(fn))
        yield
    finally:
        for owner, name, fn in reversed(originals):
            setattr(owner, name, fn)

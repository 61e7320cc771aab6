"""Safe loading of OpenMMLab checkpoints under ``torch.load(weights_only=True)``.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses the few
non-tensor objects mmengine writes into its checkpoints (the message hub's
``HistoryBuffer`` with numpy arrays).  Instead of turning safe loading off, we
allow exactly those types; anything else still fails to load.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch


def _numpy_globals() -> list:
    core = getattr(np, '_core', None) or np.core
    items: list = [np.ndarray, np.dtype, core.multiarray._reconstruct, core.multiarray.scalar]
    items += list({type(np.dtype(t)) for t in np.typecodes['All'] if t not in 'OMmVU'})
    items += [np.bool_, np.float64, np.float32, np.int64, np.int32]
    # numpy 2 pickles under ``numpy._core``, numpy 1 under ``numpy.core``:
    # files written by either must load with either.
    for old, new in (('numpy.core.multiarray', core.multiarray.__name__),):
        for name in ('_reconstruct', 'scalar'):
            items.append((getattr(core.multiarray, name), f'{old}.{name}'))
            items.append((getattr(core.multiarray, name), f'{new}.{name}'))
    return items


def openmmlab_safe_globals() -> list:
    """Types an mmengine / OpenMMLab / DeiT-style checkpoint may hold."""
    from mmengine.logging import HistoryBuffer
    return [HistoryBuffer, argparse.Namespace, *_numpy_globals()]


def _history_buffer_state(self) -> dict:
    """``HistoryBuffer.__getstate__`` without the statistics methods.

    mmengine pickles them as ``getattr(HistoryBuffer, 'min')`` etc., which a
    weights-only load must refuse (``getattr`` would open every allowed object);
    they are class-level registrations that ``__setstate__`` restores anyway.
    """
    return {k: v for k, v in self.__dict__.items() if k != 'statistics_methods'}


def allow_openmmlab_checkpoints() -> None:
    """Add :func:`openmmlab_safe_globals` to torch's weights-only allow-list
    and make mmengine write message hubs that load under it."""
    from mmengine.logging import HistoryBuffer
    HistoryBuffer.__getstate__ = _history_buffer_state
    torch.serialization.add_safe_globals(openmmlab_safe_globals())

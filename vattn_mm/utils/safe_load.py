"""Safe loading of OpenMMLab checkpoints under ``torch.load(weights_only=True)``.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses the few
non-tensor objects mmengine writes into its checkpoints (the message hub's
``HistoryBuffer`` with numpy arrays).  Instead of turning safe loading off, we
allow exactly those types; anything else still fails to load.

Every local checkpoint mmengine reads (``load_from``, ``--resume``,
``tools/test.py``) and every pretrained file goes through
:func:`load_checkpoint_file`: a file that needs other classes is refused with
an error naming the way to trust *that one file* explicitly
(``--trust-checkpoint PATH`` or ``VATTN_TRUSTED_CHECKPOINTS=PATH[:PATH...]``);
only then is it unpickled in full.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import pickle
import re
from typing import Any, Optional

import numpy as np
import torch
from mmengine.logging import print_log

#: environment variable listing trusted checkpoint files (``os.pathsep``-separated)
TRUST_ENV = 'VATTN_TRUSTED_CHECKPOINTS'


class UntrustedCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds Python objects outside the allow-list and was not
    explicitly trusted."""


class UnreadableCheckpointError(RuntimeError):
    """A checkpoint file cannot be read (truncated, corrupt, not PyTorch)."""


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


def trusted_checkpoints() -> set[str]:
    """Real paths of the files listed in ``$VATTN_TRUSTED_CHECKPOINTS``."""
    entries = os.environ.get(TRUST_ENV, '').split(os.pathsep)
    return {osp.realpath(e) for e in entries if e}


def trust_checkpoint(path: str) -> None:
    """Trust one file for full unpickling, in this process and the processes
    it starts (dataloader workers, torchrun ranks inherit the environment)."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'--trust-checkpoint: no such file: {path!r}')
    entries = [e for e in os.environ.get(TRUST_ENV, '').split(os.pathsep) if e]
    os.environ[TRUST_ENV] = os.pathsep.join(entries + [osp.realpath(path)])


def load_checkpoint_file(path: str, map_location: Optional[Any] = 'cpu') -> Any:
    """``torch.load`` with ``weights_only=True`` unless ``path`` is trusted.

    Raises:
        UntrustedCheckpointError: the file holds other objects; the message
            says how to trust it.
        UnreadableCheckpointError: the file is truncated, corrupt or not a
            PyTorch checkpoint.
    """
    path = osp.expanduser(path)
    if not osp.isfile(path):
        raise FileNotFoundError(f'checkpoint file not found: {path!r}')
    trusted = osp.realpath(path) in trusted_checkpoints()
    if trusted:
        print_log(f'Loading trusted checkpoint {path} with full unpickling '
                  f'(listed in ${TRUST_ENV}).', logger='current')
    try:
        return torch.load(path, map_location=map_location, weights_only=not trusted)
    except pickle.UnpicklingError as err:
        if trusted:
            raise _unreadable(path, err) from err
        reason = str(err).strip().splitlines()
        raise UntrustedCheckpointError(
            f'{path!r} holds Python objects outside the safe-loading allow-list '
            f'({_unsupported_global(str(err)) or (reason[-1] if reason else "?")}); it '
            'was not loaded, because unpickling them can run arbitrary code. If you '
            'trust this file, allow it explicitly: pass `--trust-checkpoint '
            f'{path}` to tools/train.py / tools/test.py, or set {TRUST_ENV}={path} '
            '(several files separated by ":"). Better: re-save its tensors only, '
            'torch.save(state_dict, path).') from err
    except (EOFError, RuntimeError, ValueError) as err:
        raise _unreadable(path, err) from err


def _unreadable(path: str, err: BaseException) -> UnreadableCheckpointError:
    return UnreadableCheckpointError(
        f'{path!r} ({osp.getsize(path)} bytes) cannot be read as a PyTorch checkpoint '
        f'(truncated or corrupt file?): {type(err).__name__}: {err}')


def _unsupported_global(message: str) -> str:
    """The class torch names in a weights-only refusal, if any."""
    found = re.search(r'Unsupported global: GLOBAL (\S+)', message)
    return f'it needs {found.group(1)}' if found else ''


def _mmengine_load_from_local(filename: str, map_location: Optional[Any] = None) -> Any:
    """mmengine's local checkpoint scheme, through :func:`load_checkpoint_file`."""
    return load_checkpoint_file(filename, map_location)


def use_trusted_checkpoint_loader() -> None:
    """Make mmengine's ``load_checkpoint`` / resume read local files with
    :func:`load_checkpoint_file`."""
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=_mmengine_load_from_local, force=True)

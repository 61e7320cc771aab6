"""Safe loading of OpenMMLab checkpoints under ``torch.load(weights_only=True)``.

torch >= 2.6 loads with ``weights_only=True`` by default, which refuses the few
non-tensor objects mmengine writes into its checkpoints (the message hub's
``HistoryBuffer`` with numpy arrays) and DeiT-style releases hold
(``argparse.Namespace``).  Instead of turning safe loading off,
:func:`load_checkpoint_file` allows exactly those types for the duration of
one load (:func:`openmmlab_globals_allowed`); anything else still fails.

A file that needs other classes is refused with an error naming the way to
trust *that one file* explicitly (``--trust-checkpoint PATH`` or
``VATTN_TRUSTED_CHECKPOINTS=PATH[:PATH...]``); only then is it unpickled in
full.  :class:`~vattn_mm.engine.SafeRunner` reads ``load_from``, resumed and
tested checkpoints this way, and pretrained backbone files are read so too.
An ``http(s)://`` URL is first downloaded into the torch hub cache
(:func:`~vattn_mm.utils.download.cached_download`); the cached file is then
loaded, and trusted, like a local one.

:func:`plain_message_hub` / :func:`restore_message_hub` turn the message hub
of a checkpoint into plain lists and back, so that the checkpoints a
``SafeRunner`` writes load with ``weights_only=True`` and no allow-list.
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import pickle
import re
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch

from .compat import get_safe_globals, load_weights_only, safe_globals
from .download import cache_path, cached_download, is_url
from .log import log
from .requires import uses_openmmlab

#: environment variable listing trusted checkpoint files (``os.pathsep``-separated)
TRUST_ENV = 'VATTN_TRUSTED_CHECKPOINTS'


class UntrustedCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds Python objects outside the allow-list and was not
    explicitly trusted."""


class UnreadableCheckpointError(RuntimeError):
    """A checkpoint file cannot be read (truncated, corrupt, not PyTorch)."""


def _numpy_globals() -> list:
    try:
        import numpy as np
    except ImportError:   # torch runs without numpy; a checkpoint then holds no numpy objects
        return []
    core = np._core if int(np.__version__.split('.')[0]) >= 2 else np.core
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
    """Types an mmengine / OpenMMLab / DeiT-style checkpoint may hold (mmengine's
    where it is installed: without it, its objects cannot be unpickled anyway)."""
    items = [argparse.Namespace, *_numpy_globals()]
    if uses_openmmlab():
        from mmengine.logging import HistoryBuffer
        items.insert(0, HistoryBuffer)
    return items


@contextmanager
def openmmlab_globals_allowed() -> Iterator[None]:
    """Allow :func:`openmmlab_safe_globals` for weights-only loads inside the
    block; torch's allow-list is as before afterwards (globals the user had
    allowed already stay allowed)."""
    present = set(get_safe_globals())
    with safe_globals(
            [g for g in openmmlab_safe_globals() if g not in present]):
        yield


def trusted_checkpoints() -> set[str]:
    """Real paths of the files listed in ``$VATTN_TRUSTED_CHECKPOINTS``."""
    entries = os.environ.get(TRUST_ENV, '').split(os.pathsep)
    return {osp.realpath(e) for e in entries if e}


def trust_checkpoint(path: str) -> None:
    """Trust one file for full unpickling, in this process and the processes
    it starts (dataloader workers, torchrun ranks inherit the environment).
    For a URL, the file it is downloaded to is trusted."""
    if is_url(path):
        path = cache_path(path)
    elif not osp.isfile(path):
        raise FileNotFoundError(f'--trust-checkpoint: no such file: {path!r}')
    entries = [e for e in os.environ.get(TRUST_ENV, '').split(os.pathsep) if e]
    os.environ[TRUST_ENV] = os.pathsep.join(entries + [osp.realpath(path)])


def load_checkpoint_file(path: str, map_location: Optional[Any] = 'cpu') -> Any:
    """``torch.load`` with ``weights_only=True`` unless ``path`` is trusted.

    ``path`` may be an ``http(s)://`` URL: its cached download is loaded.

    Raises:
        CheckpointDownloadError: a URL could not be downloaded.
        UntrustedCheckpointError: the file holds other objects; the message
            says how to trust it.
        UnreadableCheckpointError: the file is truncated, corrupt or not a
            PyTorch checkpoint.
    """
    url = path if is_url(path) else None
    path = cached_download(url) if url else osp.expanduser(path)
    if not osp.isfile(path):
        raise FileNotFoundError(f'checkpoint file not found: {path!r}')
    problem = _not_a_checkpoint(path)
    if problem:
        raise _unreadable(path, ValueError(problem), url)
    trusted = osp.realpath(path) in trusted_checkpoints()
    if trusted:
        log(f'Loading trusted checkpoint {path} with full unpickling '
                  f'(listed in ${TRUST_ENV}).')
    try:
        if trusted:
            return torch.load(path, map_location=map_location, weights_only=False)
        present = set(get_safe_globals())
        return load_weights_only(path, map_location,
                                 [g for g in openmmlab_safe_globals() if g not in present])
    except pickle.UnpicklingError as err:
        if trusted:
            raise _unreadable(path, err, url) from err
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
        raise _unreadable(path, err, url) from err


def _not_a_checkpoint(path: str) -> Optional[str]:
    """Why ``path`` cannot be a ``torch.save`` file (zip, or a legacy pickle /
    tar), judged by its first bytes; ``None`` if it can."""
    with open(path, 'rb') as f:
        head = f.read(262)
    if head.startswith((b'PK\x03\x04', b'\x80')) or head[257:262] == b'ustar':
        return None
    return f'not a zip or pickle file: it starts with {head[:40]!r}'


def _unreadable(path: str, err: BaseException,
                url: Optional[str] = None) -> UnreadableCheckpointError:
    source = (f' (downloaded from {url}; remove it to download it again)' if url else '')
    return UnreadableCheckpointError(
        f'{path!r} ({osp.getsize(path)} bytes){source} cannot be read as a PyTorch checkpoint '
        f'(truncated or corrupt file?): {type(err).__name__}: {err}')


def _unsupported_global(message: str) -> str:
    """The class torch names in a weights-only refusal, if any."""
    found = re.search(r'Unsupported global: GLOBAL (\S+)', message)
    return f'it needs {found.group(1)}' if found else ''


#: ``scheme://`` of the non-local sources mmengine's ``CheckpointLoader`` reads
URI_SCHEME = re.compile(r'^[A-Za-z][\w+.-]*://')


def load_runner_checkpoint(filename: str, map_location: Optional[Any] = 'cpu') -> Any:
    """A checkpoint for ``load_from`` / resume / test: local files and
    ``http(s)://`` URLs through :func:`load_checkpoint_file`, mmengine's other
    schemes (``open-mmlab://``, ``torchvision://``, ``s3://``, ...) through mmengine."""
    if URI_SCHEME.match(filename) and not is_url(filename):
        from mmengine.runner.checkpoint import _load_checkpoint
        return _load_checkpoint(filename, map_location=map_location)
    return load_checkpoint_file(filename, map_location)


#: what a ``HistoryBuffer`` becomes in a checkpoint written by :func:`plain_message_hub`
_PLAIN_BUFFER_KEYS = frozenset({'log_history', 'count_history', 'max_length'})


def plain_message_hub(state: dict) -> dict:
    """A message hub ``state_dict`` with its ``HistoryBuffer`` objects as
    dicts of lists and numpy scalars as Python numbers (``weights_only``
    loads them without an allow-list)."""
    import numpy as np
    from mmengine.logging import HistoryBuffer
    scalars = {}
    for key, value in state['log_scalars'].items():
        if isinstance(value, HistoryBuffer):
            logs, counts = value.data
            value = dict(log_history=logs.tolist(), count_history=counts.tolist(),
                         max_length=value.max_length)
        scalars[key] = value
    info = {k: v.item() if isinstance(v, np.generic) else v
            for k, v in state['runtime_info'].items()}
    return dict(state, log_scalars=scalars, runtime_info=info)


def restore_message_hub(state: dict) -> dict:
    """Undo :func:`plain_message_hub` (other entries are kept as they are)."""
    from mmengine.logging import HistoryBuffer
    scalars = {k: HistoryBuffer(**v) if isinstance(v, dict) and v.keys() == _PLAIN_BUFFER_KEYS
               else v for k, v in state['log_scalars'].items()}
    return dict(state, log_scalars=scalars)

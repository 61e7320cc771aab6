"""Crash-safe writing of checkpoints and of ``last_checkpoint``.

mmengine writes a checkpoint by opening the target path and writing into it,
removes the oldest kept checkpoint *before* saving the new one and writes
``last_checkpoint`` in place: a process killed at the wrong moment leaves a
truncated file where the last good checkpoint was, or no checkpoint at all.

:func:`atomic_write` writes to a temporary file in the same directory,
flushes and fsyncs it, renames it over the target with :func:`os.replace`
(atomic on POSIX) and fsyncs the directory.  :class:`AtomicLocalBackend` is
mmengine's local file backend writing that way; it is registered as the file
backend ``'atomic_local'`` and used by
:class:`~vattn_mm.engine.CrashSafeCheckpointHook`.
"""
from __future__ import annotations

import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Union

from mmengine.fileio import LocalBackend

#: prefix of the temporary files (never matched by ``*.pth`` globs)
TMP_PREFIX = '.tmp-'


def fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's file-creation mask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = current_umask()


def atomic_write(path: Union[str, Path], data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either its old
    content or all of ``data``, never a part of it, even after a crash."""
    path = osp.abspath(os.fspath(path))
    directory = osp.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + osp.basename(path) + '.', dir=directory)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give a plain file's mode
        os.replace(tmp, path)
    except BaseException:
        if osp.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(directory)


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend with atomic ``put`` / ``put_text``."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        atomic_write(filepath, obj)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        atomic_write(filepath, obj.encode(encoding))

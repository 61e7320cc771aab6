"""Crash-safe writing of checkpoints, of ``last_checkpoint`` and of output
folders.

mmengine writes a checkpoint by opening the target path and writing into it,
removes the oldest kept checkpoint *before* saving the new one and writes
``last_checkpoint`` in place: a process killed at the wrong moment leaves a
truncated file where the last good checkpoint was, or no checkpoint at all.

:func:`atomic_write` writes to a temporary file in the same directory,
flushes and fsyncs it, renames it over the target with :func:`os.replace`
(atomic on POSIX) and fsyncs the directory (mmengine's file backend writing
that way is :class:`~vattn_mm.engine.hooks.AtomicLocalBackend`).  :func:`atomic_dir` fills
a temporary folder beside an output folder and swaps it in at the end, so
that a failed run leaves the output folder as it was.
"""
from __future__ import annotations

import errno
import os
import os.path as osp
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

#: prefix of the temporary files (never matched by ``*.pth`` globs)
TMP_PREFIX = '.tmp-'

#: the errors of a full disk or an exhausted quota
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """A write failed for lack of space; the message names the file or
    folder, the space it needed and what was kept."""


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
    except BaseException as err:
        if osp.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            raise DiskFullError(err.errno, f'no space left in {directory} to write {path} '
                                f'({len(data)} bytes needed, {shutil.disk_usage(directory).free} '
                                'free); what was there under that name is unchanged') from err
        raise
    fsync_dir(directory)


def replace_dir(new: Union[str, Path], target: Union[str, Path]) -> None:
    """Put folder ``new`` where ``target`` is; a ``target`` that exists is
    removed only once ``new`` is in place (and put back if that fails)."""
    new, target = Path(new), Path(target)
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f'{TMP_PREFIX}{target.name}.old-', dir=target.parent))
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_dir(target: Union[str, Path]) -> Iterator[Path]:
    """A new, empty folder beside ``target`` to write into, with the mode
    ``mkdir`` gives; it replaces ``target`` (:func:`replace_dir`) when the
    ``with`` block ends and is removed if the block raises::

        with atomic_dir(out_dir) as tmp:
            (tmp / 'index.json').write_text(...)
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f'{TMP_PREFIX}{target.name}.', dir=target.parent))
    tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


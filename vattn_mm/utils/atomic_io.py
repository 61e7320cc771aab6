"""Crash-safe writing of checkpoints and of ``last_checkpoint``.

mmengine writes a checkpoint by opening the target path and writing into it,
removes the oldest kept checkpoint *before* saving the new one and writes
``last_checkpoint`` in place: a process killed at the wrong moment leaves a
truncated file where the last good checkpoint was, or no checkpoint at all.

Here every local write through mmengine's file backend goes to a temporary
file in the same directory, is flushed and fsync'ed, then renamed over the
target with :func:`os.replace` (atomic on POSIX) and the directory is
fsync'ed.  The registered ``CheckpointHook`` keeps mmengine's behaviour but
removes stale checkpoints only after the new one and ``last_checkpoint`` are
safely on disk.
"""
from __future__ import annotations

import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Optional, Union

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS

#: prefix of the temporary files (never matched by ``*.pth`` globs)
TMP_PREFIX = '.tmp-'


def _fsync_dir(directory: str) -> None:
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


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


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
    _fsync_dir(directory)


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend with atomic ``put`` / ``put_text``."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        atomic_write(filepath, obj)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        atomic_write(filepath, obj.encode(encoding))


class CrashSafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) that never has fewer good
    checkpoints on disk than it keeps: the new checkpoint and then
    ``last_checkpoint`` are written atomically before the oldest one goes."""

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        stale = self._rotate(runner, step)
        ckpt_filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, ckpt_filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, ckpt_filename, self.file_client_args,
            save_optimizer=self.save_optimizer,
            save_param_scheduler=self.save_param_scheduler, meta=meta,
            by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        atomic_write(osp.join(runner.work_dir, 'last_checkpoint'), str(self.last_ckpt).encode())
        if stale is not None:
            if self.file_backend.isfile(stale):
                self.file_backend.remove(stale)
            elif self.file_backend.isdir(stale):  # deepspeed checkpoints are folders
                self.file_backend.rmtree(stale)

    def _rotate(self, runner, step: int) -> Optional[str]:
        """mmengine's ``max_keep_ckpts`` bookkeeping; returns the checkpoint
        to remove once the new one is saved (``None`` if none)."""
        if self.max_keep_ckpts <= 0 or (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            return None
        stale = None
        if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
            stale = self.file_backend.join_path(
                self.out_dir, self.filename_tmpl.format(self.keep_ckpt_ids.popleft()))
        self.keep_ckpt_ids.append(step)
        runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        return stale if is_main_process() else None


def use_crash_safe_checkpoints() -> None:
    """Route mmengine's local writes through :class:`AtomicLocalBackend` and
    make ``type='CheckpointHook'`` build :class:`CrashSafeCheckpointHook`."""
    register_backend('local', AtomicLocalBackend, force=True, prefixes='')
    HOOKS.register_module(name='CheckpointHook', module=CrashSafeCheckpointHook, force=True)

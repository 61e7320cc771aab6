"""A full disk while a run writes its logs, scalars or metrics.

Checkpoints are written atomically (:func:`~vattn_mm.utils.atomic_io.atomic_write`
names the file, the bytes needed and those free).  mmengine appends the text
log and the scalar files in place: its log handler prints a traceback for
every line it could not write and the run goes on without logs, and its
visualiser raises a bare ``OSError`` that names no file.  ``SafeRunner`` turns
both into one :class:`~vattn_mm.utils.atomic_io.DiskFullError` that stops the
run, naming the folder, the space free, the latest checkpoint (unchanged) and
the command that resumes from it once space is made.
"""
from __future__ import annotations

import logging
import os.path as osp
import shutil
import sys
from pathlib import Path

from ..utils.atomic_io import NO_SPACE, DiskFullError


def out_of_space_error(work_dir: str, resume_command: str, what: str,
                       err: OSError) -> DiskFullError:
    """The error for a run in ``work_dir`` that could not write ``what`` for
    lack of space; ``resume_command`` (``'... --resume {}'``) is given without
    a file, which resumes from the latest checkpoint."""
    free = shutil.disk_usage(work_dir).free if osp.isdir(work_dir) else 0
    marker = Path(work_dir, 'last_checkpoint')
    latest = marker.read_text().strip() if marker.is_file() else None
    if latest and osp.isfile(latest):
        kept = (f'the latest checkpoint, {latest}, is unchanged. Free space (a checkpoint takes '
                f'{osp.getsize(latest)} bytes) and run again; a training resumes with '
                f'`{resume_command.format("").rstrip()}`')
    else:
        kept = 'no checkpoint had been written. Free space and run again'
    return DiskFullError(err.errno, f'no space left in {work_dir} to write {what} ({free} bytes '
                                    f'free; {err.strerror}): {kept}')


def stop_on_full_disk(logger: logging.Logger, work_dir: str, resume_command: str) -> None:
    """Make ``logger``'s log files raise :class:`DiskFullError` when the disk
    is full (once; later failures are reported the standard way).  The
    handlers keep the run's folder and command, not the runner: mmengine
    keeps its loggers for the life of the process."""
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handleError = _raise_when_full(work_dir, resume_command, handler)


def _raise_when_full(work_dir: str, resume_command: str, handler: logging.FileHandler):
    def handle_error(record: logging.LogRecord) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            del handler.handleError   # the class's own again: the error is raised once
            raise out_of_space_error(work_dir, resume_command, f'the log {handler.baseFilename}',
                                     err) from err
        logging.FileHandler.handleError(handler, record)
    return handle_error

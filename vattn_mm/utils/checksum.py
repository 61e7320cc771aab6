"""Checksums of the checkpoints a run writes, verified when one is read back.

A checkpoint ``iter_8.pth`` written through the runner's atomic file backend
gets ``iter_8.pth.sha256`` beside it, the SHA-256 of the bytes written, in
``sha256sum``'s format (``sha256sum -c iter_8.pth.sha256`` checks it by hand).
Resuming, loading and evaluating verify a file that has one, so a checkpoint
truncated or changed on disk since (a bit flip inside tensor data loads
silently otherwise) is refused by name, with the newest checkpoint beside it
that still verifies.
"""
from __future__ import annotations

import hashlib
import os
import os.path as osp
from typing import Optional

from .atomic_io import atomic_write

SUFFIX = '.sha256'
#: what a checkpoint file's name ends with (the files that get a checksum)
CHECKPOINT_SUFFIX = '.pth'


class CorruptCheckpointError(ValueError):
    """A checkpoint's bytes differ from the checksum written with it."""


def write_checksum(path: str, data: bytes) -> None:
    """Write ``path``'s checksum file for its content ``data``."""
    line = f'{hashlib.sha256(data).hexdigest()}  {osp.basename(path)}\n'
    atomic_write(path + SUFFIX, line.encode())


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def recorded_sha256(path: str) -> Optional[str]:
    """The checksum written with ``path``, or None if it has none."""
    try:
        with open(path + SUFFIX, encoding='ascii') as f:
            return f.read().split()[0]
    except (FileNotFoundError, IndexError, UnicodeDecodeError):
        return None


def checksum_problem(path: str) -> Optional[str]:
    """Why ``path`` does not match its checksum, or None (it matches, or
    has none)."""
    expected = recorded_sha256(path)
    if expected is None or not osp.isfile(path):
        return None
    actual = file_sha256(path)
    if actual == expected:
        return None
    return (f'{path} is damaged: its SHA-256 is {actual[:12]}..., not the {expected[:12]}... '
            f'written with it ({osp.basename(path)}{SUFFIX}; {os.path.getsize(path)} bytes now): '
            'truncated or changed on disk since it was saved')


def newest_good_checkpoint(directory: str, other_than: str = '') -> Optional[str]:
    """The most recently written checkpoint in ``directory`` whose checksum
    matches (checkpoints without one are not vouched for), or None."""
    names = [n for n in os.listdir(directory) if n.endswith(CHECKPOINT_SUFFIX)]
    paths = sorted((osp.join(directory, n) for n in names), key=osp.getmtime, reverse=True)
    skip = osp.realpath(other_than) if other_than else None
    for path in paths:
        if osp.realpath(path) != skip and recorded_sha256(path) is not None \
                and checksum_problem(path) is None:
            return path
    return None


def verify_checkpoint(path: str, resume_command: Optional[str] = None) -> None:
    """Raise :class:`CorruptCheckpointError` if ``path`` does not match its
    checksum, naming the newest good checkpoint beside it and, with
    ``resume_command`` (``'... --resume {}'``), the command that resumes from it."""
    problem = checksum_problem(path)
    if problem is None:
        return
    good = newest_good_checkpoint(osp.dirname(osp.abspath(path)), other_than=path)
    if good is None:
        raise CorruptCheckpointError(f'{problem}. No other checkpoint in its folder verifies.')
    hint = f': `{resume_command.format(good)}`' if resume_command else ''
    raise CorruptCheckpointError(f'{problem}. The newest checkpoint that verifies is {good}'
                                 + (f'; resume from it{hint}' if resume_command else ''))

"""Checkpoints by URL: downloaded once into the torch hub cache, safely.

:func:`cached_download` fetches an ``http(s)://`` URL to
``torch.hub.get_dir()/checkpoints/<file name>`` (``$TORCH_HOME/hub/...``, the
place torch's and mmengine's ``load_state_dict_from_url`` use, so a file they
fetched is reused and the other way round).  A file found there is used
without any network access.  A download

- records its URL in ``<name>.url`` (a file name two URLs share gets a
  folder per URL), goes to ``<name>.partial`` beside the target and continues an existing
  ``.partial`` with an HTTP ``Range`` request (from the start when the server
  ignores it); only a complete, checked file is fsync'ed and renamed to
  ``<name>``: a killed download never leaves a part under the final name;
- continues a part only for the same version of the file (``If-Range``
  with the ETag or date recorded when it was started; the server sends the
  whole file when it changed);
- is checked against the length the server announced (or, where it
  announced none, the total a second, one-byte request names) and, where one
  is known, a sha256: a ``#sha256=<hex>`` URL fragment (pip's convention), a
  torch-hub-style file name ``name-<8 or more hex digits>.ext`` (a hash
  prefix, as ``torch.hub`` checks) or the ``sha256`` argument;
- holds an exclusive lock on ``<name>.lock``, so that the ranks of a job
  download a file once;
- fails fast, with :class:`CheckpointDownloadError` naming the URL and the
  cause, for an unreachable host, an HTTP error status, a truncated or
  stalled transfer, a hash mismatch, an HTML page instead of the file, a
  file whose completeness cannot be told (no length, no sha256) or a full
  disk (nothing is then left under the final name).
"""
from __future__ import annotations

import fcntl
import hashlib
import http.client
import os
import os.path as osp
import re
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from typing import BinaryIO, Iterator, Optional

import torch

from .atomic_io import NO_SPACE, atomic_write, fsync_dir
from .log import log

#: seconds to wait for a connection and for each read of the body
DEFAULT_TIMEOUT = 30.0
_CHUNK = 1 << 20
#: below this size no progress line is drawn
_PROGRESS_MIN_BYTES = 16 << 20
_HEX = re.compile(r'^[0-9a-f]{8,64}$')
#: ``name-<hash prefix>.ext``, as ``torch.hub`` reads it (8 or more hex digits here)
_HUB_HASH_NAME = re.compile(r'-([0-9a-f]{8,64})\.[^.]+$')
_HTML_START = (b'<!doctype html', b'<html', b'<head', b'<body', b'<?xml')


class CheckpointDownloadError(RuntimeError):
    """A URL could not be downloaded into a complete, verified file."""


def is_url(path: str) -> bool:
    """Whether ``path`` is an ``http://`` or ``https://`` URL."""
    return isinstance(path, str) and path.lower().startswith(('http://', 'https://'))


def cache_path(url: str) -> str:
    """Where :func:`cached_download` keeps ``url``:
    ``torch.hub.get_dir()/checkpoints/<last part of the URL path>``, unless
    a file there came from another URL (``<name>.url`` records the source;
    a file without it, e.g. fetched by torch, is taken as this URL's): then
    ``checkpoints/<hash of the URL>/<name>``."""
    name = osp.basename(urllib.parse.urlsplit(url).path)
    if name in ('', '.', '..'):
        raise ValueError(f'{url!r} names no file (its path must end with a file name)')
    path = osp.join(torch.hub.get_dir(), 'checkpoints', name)
    if osp.isfile(path) and _recorded_source(path) not in (None, _strip_fragment(url)):
        url_hash = hashlib.sha256(_strip_fragment(url).encode()).hexdigest()[:16]
        return osp.join(osp.dirname(path), url_hash, name)
    return path


def _read_text(path: str) -> Optional[str]:
    """A small record file's stripped text; None if it is missing or empty."""
    try:
        with open(path) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def _recorded_source(path: str) -> Optional[str]:
    """The URL whose download is (or is becoming) ``path``, if recorded."""
    return _read_text(path + '.url')


def expected_hashes(url: str, sha256: Optional[str] = None) -> list[tuple[str, str]]:
    """``(source, hex)`` of each sha256 (or prefix of 8+ hex digits) a file
    from ``url`` must have: ``sha256``, the URL's ``#sha256=`` fragment, a
    hub-style file name's."""
    found = []
    if sha256:
        found.append(('sha256 argument', sha256))
    fragment = urllib.parse.urlsplit(url).fragment
    if fragment.startswith('sha256='):
        found.append(('#sha256= fragment', fragment[len('sha256='):]))
    name_hash = _HUB_HASH_NAME.search(osp.basename(urllib.parse.urlsplit(url).path))
    if name_hash:
        found.append(('file name', name_hash.group(1)))
    for source, value in found:
        if not _HEX.match(value.lower()):
            raise ValueError(f'{url!r}: the {source} gives {value!r}, not a sha256 '
                             '(8 to 64 hexadecimal digits)')
    return [(source, value.lower()) for source, value in found]


def _file_sha256(path: str):
    """A sha256 hasher fed with the file's bytes."""
    hasher = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(_CHUNK), b''):
            hasher.update(block)
    return hasher


def _hash_problem(digest: str, expected: list[tuple[str, str]]) -> Optional[str]:
    wrong = [(source, value) for source, value in expected if not digest.startswith(value)]
    if not wrong:
        return None
    source, value = wrong[0]
    return f'sha256 mismatch: expected {value} (from the {source}), got {digest}'


@contextmanager
def _exclusive(url: str, path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (the file stays: removing
    it would let two processes lock two different files)."""
    try:
        os.makedirs(osp.dirname(path), exist_ok=True)
        fd = os.open(path + '.lock', os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise CheckpointDownloadError(
            f'cannot download {url}: the cache folder {osp.dirname(path)!r} is not writable '
            f'({err}); set TORCH_HOME to a writable folder') from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def cached_download(url: str, sha256: Optional[str] = None,
                    timeout: float = DEFAULT_TIMEOUT) -> str:
    """The local path of ``url``'s file, downloading it on first use.

    Args:
        url: ``http(s)://...``; a ``#sha256=<hex>`` fragment gives its hash.
        sha256: expected sha256 (or a hex prefix of 8+ digits of it).
        timeout: seconds to wait for the connection and for each read.

    Raises:
        CheckpointDownloadError: the host is unreachable, the server answers
            an error status or an HTML page, the transfer ends short or
            stalls, or the file does not match its hash; nothing is placed
            under the final name then.
    """
    if not is_url(url):
        raise ValueError(f'not an http(s) URL: {url!r}')
    path = cache_path(url)
    expected = expected_hashes(url, sha256)
    if osp.isfile(path):  # no network access for a cached file
        _check_cached(url, path, expected)
        return path
    with _exclusive(url, path):
        if osp.isfile(path):  # another process finished a download while we waited
            if cache_path(url) != path:  # of another URL with this file name
                return cached_download(url, sha256, timeout)
            _check_cached(url, path, expected)
            return path
        if _recorded_source(path) != _strip_fragment(url):  # claim the name
            if osp.exists(path + '.partial'):  # another URL's part
                os.remove(path + '.partial')
            atomic_write(path + '.url', _strip_fragment(url).encode())
        log(f'Downloading {_strip_fragment(url)} to {path}')
        _download(url, path, expected, timeout)
    return path


def _check_cached(url: str, path: str, expected: list[tuple[str, str]]) -> None:
    if not expected:
        return
    problem = _hash_problem(_file_sha256(path).hexdigest(), expected)
    if problem:
        raise CheckpointDownloadError(
            f'the cached file {path!r} of {url} does not match its hash ({problem}); '
            'it was not loaded. Remove it to download it again.')


def _strip_fragment(url: str) -> str:
    return urllib.parse.urlsplit(url)._replace(fragment='').geturl()


def _open(url: str, offset: int, timeout: float, validator: Optional[str] = None,
          last: Optional[int] = None):
    """The response to a GET of ``url`` from byte ``offset`` (to byte ``last``),
    only if the file is still the one ``validator`` (an ETag or a date) names."""
    request = urllib.request.Request(_strip_fragment(url),
                                     headers={'User-Agent': 'vattn-mm', 'Accept': '*/*'})
    if offset or last is not None:
        request.add_header('Range', f'bytes={offset}-{"" if last is None else last}')
    if validator:
        request.add_header('If-Range', validator)
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if offset and err.code == 416:  # the partial file does not fit: start again
            return None
        raise CheckpointDownloadError(f'cannot download {url}: HTTP {err.code} {err.reason}') \
            from err
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, 'reason', err)
        raise CheckpointDownloadError(
            f'cannot download {url}: no connection to the host ({reason}). Without network '
            f'access, put the file at {cache_path(url)!r} or use a local path') from err


def _announced(response) -> tuple[int, Optional[int]]:
    """``(first byte, size of the complete file)`` of a response (the size
    ``None`` where the server does not say)."""
    if response.status == 206:
        found = re.match(r'bytes (\d+)-\d+/(\d+|\*)', response.headers.get('Content-Range', ''))
        if not found:
            return -1, None
        return int(found.group(1)), None if found.group(2) == '*' else int(found.group(2))
    length = response.headers.get('Content-Length')
    return 0, int(length) if length and length.isdigit() else None


def _html_problem(response, first: bytes) -> Optional[str]:
    content_type = response.headers.get('Content-Type', '')
    if content_type.split(';')[0].strip().lower() in ('text/html', 'application/xhtml+xml'):
        return f'the server sent an HTML page (Content-Type: {content_type}), not a checkpoint'
    if first.lstrip()[:16].lower().startswith(_HTML_START):
        head = first.lstrip()[:60].decode('utf-8', 'replace')
        return f'the server sent an HTML page, not a checkpoint (it starts with {head!r})'
    return None


def _validator(response) -> Optional[str]:
    """What names this version of the file for ``If-Range``: a strong ETag,
    else the modification date (None if the server gives neither)."""
    etag = response.headers.get('ETag')
    if etag and not etag.startswith('W/'):
        return etag
    return response.headers.get('Last-Modified')


def _resumed_response(url: str, partial: str, timeout: float):
    """``(response, offset)``: the rest of ``partial`` where the server sends
    it (206 from its size, for the same version of the file: ``If-Range``
    with the validator recorded when the part was started), else the whole
    file (offset 0). A part without a recorded validator is not continued."""
    validator = _read_text(partial + '.validator')
    offset = osp.getsize(partial) if osp.isfile(partial) and validator else 0
    response = _open(url, offset, timeout, validator if offset else None)
    if offset and response is not None and response.status == 206 \
            and _announced(response)[0] == offset:
        return response, offset
    if response is None or offset and response.status == 206:  # 416, or another range
        if response is not None:
            response.close()
        response = _open(url, 0, timeout)
    return response, 0  # a 200 answer holds the whole file


def _download(url: str, path: str, expected: list[tuple[str, str]], timeout: float) -> None:
    partial = path + '.partial'
    response, offset = _resumed_response(url, partial, timeout)
    with response:
        total = _announced(response)[1]
        framed = response.headers.get('Transfer-Encoding', '').lower() == 'chunked'
        if offset == 0:
            validator = _validator(response)
            if validator:
                atomic_write(partial + '.validator', validator.encode())
            elif osp.exists(partial + '.validator'):
                os.remove(partial + '.validator')
        first = b''
        while len(first) < 64:  # enough to tell an HTML page
            block = _read(url, response, 4096, offset + len(first), total)
            if not block:
                break
            first += block
        problem = _html_problem(response, first) if offset == 0 else None
        if problem:
            if osp.exists(partial):
                os.remove(partial)
            raise CheckpointDownloadError(f'cannot download {url}: {problem}; nothing was cached')
        hasher = _file_sha256(partial) if offset else hashlib.sha256()
        try:
            with open(partial, 'ab' if offset else 'wb') as out:
                size = _copy(url, response, first, out, hasher, offset, total)
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            if err.errno not in NO_SPACE:
                raise
            folder = osp.dirname(path)
            need = f'{total} bytes' if total is not None else 'the whole file'
            raise CheckpointDownloadError(
                f'no space left in {folder!r} for {url}: {osp.getsize(partial)} bytes written, '
                f'{need} needed, {shutil.disk_usage(folder).free} bytes free. Free space or set '
                f'TORCH_HOME to a larger disk (the part is kept in {partial!r} and continued '
                'next time)') from err
    if total is None and not expected and not framed:
        total = _length_of(url, timeout)
    if total is None and not expected and not framed:
        os.remove(partial)
        raise CheckpointDownloadError(
            f'cannot tell whether the download of {url} is complete: the server gives neither '
            'its length nor a way to ask for it, and no sha256 is known; add the file\'s sha256 '
            'as a #sha256=<hex> fragment of the URL (the download was discarded)')
    if total is not None and size != total:
        raise CheckpointDownloadError(
            f'download of {url} truncated: got {size} of {total} bytes (the part is kept in '
            f'{partial!r} and continued next time)')
    problem = _hash_problem(hasher.hexdigest(), expected)
    if problem:
        os.remove(partial)
        raise CheckpointDownloadError(f'{url}: {problem}; the download was discarded')
    os.replace(partial, path)
    if osp.exists(partial + '.validator'):
        os.remove(partial + '.validator')
    fsync_dir(osp.dirname(path))


def _length_of(url: str, timeout: float) -> Optional[int]:
    """The file's length from a second request (its first byte: a 206
    answer names the total), None where the server does not say."""
    response = _open(url, 0, timeout, last=0)
    if response is None:
        return None
    with response:
        return _announced(response)[1] if response.status == 206 else None


def _read(url: str, response, amount: int, size: int, total: Optional[int]) -> bytes:
    """Up to ``amount`` bytes of the body (``b''`` at its end); a stalled or
    dropped connection is a :class:`CheckpointDownloadError`."""
    try:
        return response.read1(amount)  # what has arrived: a stall loses no received byte
    except (OSError, http.client.HTTPException) as err:
        of_total = f' of {total}' if total is not None else ''
        raise CheckpointDownloadError(
            f'download of {url} truncated: got {size}{of_total} bytes, then '
            f'{type(err).__name__}: {err} (the part is kept and continued next time)') from err


def _copy(url: str, response, first: bytes, out: BinaryIO, hasher, offset: int,
          total: Optional[int]) -> int:
    """Write the body to ``out`` (hashing it); the file size reached."""
    size = offset
    progress = _Progress(url, total) \
        if total and total >= _PROGRESS_MIN_BYTES and sys.stderr.isatty() else None
    block = first
    try:
        while block:
            out.write(block)
            hasher.update(block)
            size += len(block)
            if progress:
                progress.show(size)
            block = _read(url, response, _CHUNK, size, total)
    finally:
        if progress:
            progress.done()
    return size


class _Progress:
    """One updating line on stderr (drawn at most twice a second)."""

    def __init__(self, url: str, total: int):
        self.name = osp.basename(urllib.parse.urlsplit(url).path)
        self.total, self.last = total, 0.0

    def show(self, size: int) -> None:
        now = time.monotonic()
        if now - self.last >= 0.5:
            self.last = now
            sys.stderr.write(f'\rdownloading {self.name}: {size >> 20}/{self.total >> 20} MiB '
                             f'({100 * size // self.total}%)')
            sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write('\n')
        sys.stderr.flush()

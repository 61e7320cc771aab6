"""Downloads against a server that changes the file between tries, sends no
length, or a disk that fills up: never a spliced, unchecked or half file
under the final name."""
import hashlib
import re

import pytest

from vattn_mm.utils import CheckpointDownloadError, cached_download

from .test_download import STALL_TIMEOUT, assert_nothing_cached, hub, micro, path_of, serve, server  # noqa: F401


def test_a_part_of_a_file_that_changed_is_not_continued(server, hub, micro):  # noqa: F811
    """The part of version 1 is continued with ``If-Range`` naming it; the
    server has version 2 and sends all of it, which replaces the part."""
    old = micro[1]
    new = bytes(b ^ 0xFF for b in old[:64]) + old[64:]
    url = serve(server, 'changed.pth', old, mode='stall')
    with pytest.raises(CheckpointDownloadError, match='truncated'):
        cached_download(url, timeout=STALL_TIMEOUT)
    assert (hub / 'changed.pth.partial').read_bytes() == old[:len(old) // 2]
    server.files[path_of(url)], server.modes[path_of(url)] = new, 'ok'
    assert open(cached_download(url), 'rb').read() == new
    resumed = server.requests_for(path_of(url))[-1]
    assert resumed['Range'] == f'bytes={len(old) // 2}-' and resumed['If-Range'].startswith('"')
    assert sorted(p.name for p in hub.iterdir()) == ['changed.pth', 'changed.pth.lock',
                                                     'changed.pth.url']


def test_a_part_without_a_validator_starts_again(server, hub, micro):  # noqa: F811
    data = micro[1]
    url = serve(server, 'unvouched.pth', data)
    hub.mkdir(parents=True)
    (hub / 'unvouched.pth.partial').write_bytes(b'from who knows where')
    assert open(cached_download(url), 'rb').read() == data
    assert 'Range' not in server.requests_for(path_of(url))[-1]


@pytest.mark.parametrize('mode,sha256,problem', [
    ('no_length', False, None),                  # a one-byte request tells the length
    ('no_length_no_range', True, None),          # the sha256 decides
    ('no_length_truncate', False, r'truncated: got {half} of {size} bytes'),
    ('no_length_no_range', False, r'cannot tell whether the download of .* is complete'),
])
def test_a_download_without_a_length(server, hub, micro, mode, sha256, problem):  # noqa: F811
    data = micro[1]
    fragment = f'#sha256={hashlib.sha256(data).hexdigest()}' if sha256 else ''
    url = serve(server, f'{mode}.pth', data, mode=mode) + fragment
    if problem is None:
        assert open(cached_download(url), 'rb').read() == data
        return
    with pytest.raises(CheckpointDownloadError,
                       match=problem.format(half=len(data) // 2, size=len(data))):
        cached_download(url)
    assert not (hub / f'{mode}.pth').exists()


@pytest.fixture
def small_disk(tmpfs, monkeypatch):
    """``$TORCH_HOME`` on a tmpfs of 256 KiB."""
    home = tmpfs('256k')
    monkeypatch.setenv('TORCH_HOME', str(home))
    import torch
    monkeypatch.setattr(torch.hub, '_hub_dir', None)
    return home / 'hub' / 'checkpoints'


def test_a_full_disk_leaves_nothing_under_the_final_name(server, small_disk):  # noqa: F811
    data = bytes(range(256)) * 4096   # 1 MiB
    url = serve(server, 'big.pth', data)
    with pytest.raises(CheckpointDownloadError,
                       match=rf'no space left in .*{re.escape(url)}: \d+ bytes written, '
                             rf'{len(data)} bytes needed, \d+ bytes free\. Free space or set '
                             'TORCH_HOME'):
        cached_download(url)
    assert not (small_disk / 'big.pth').exists()

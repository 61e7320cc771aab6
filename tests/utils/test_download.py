"""Checkpoints by URL (``vattn_mm.utils.download``), against a server on
127.0.0.1: downloaded once into the torch hub cache, resumed, checked
(length, sha256, HTML), loaded weights-only; then read with no network; every
failure a :class:`CheckpointDownloadError` naming the URL and leaving nothing
under the final name."""
import hashlib
import io
import os
import re
import socket
import threading
from pathlib import Path

import pytest
import torch

from vattn_mm.backbones import CheckpointError
from vattn_mm.engine import SafeRunner
from vattn_mm.utils import (TRUST_ENV, CheckpointDownloadError, UnreadableCheckpointError,
                            UntrustedCheckpointError, cached_download, load_checkpoint_file,
                            load_runner_checkpoint, trust_checkpoint)
from vattn_mm.utils.download import cache_path

from ..backbone_cases import build_micro
from ..golden import case_paths, load_fixture, official_arch, write_released
from ..http_server import FileServer
from ..tools import load_tool


#: the read timeout of the stalled transfers: the server sends the first half of
#: the file at once, which must arrive within it even on a loaded machine (the
#: client then waits this long for the rest; the messages say which happened)
STALL_TIMEOUT = 2.0


class CustomMeta:
    """A class outside the safe-loading allow-list."""


@pytest.fixture(scope='module')
def micro():
    """A micro PVTv2 and its checkpoint as bytes."""
    model = build_micro('PVTv2')
    buffer = io.BytesIO()
    torch.save({'state_dict': model.state_dict(), 'meta': {'epoch': 1}}, buffer)
    return model, buffer.getvalue()


@pytest.fixture(scope='module')
def server():
    with FileServer() as srv:
        yield srv


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """``$TORCH_HOME`` in a temporary folder; returns the checkpoint cache."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    monkeypatch.setattr(torch.hub, '_hub_dir', None)  # no set_dir() of another test
    return tmp_path / 'torch_home' / 'hub' / 'checkpoints'


def serve(server, name: str, data: bytes, mode: str = 'ok') -> str:
    """Serve ``data`` at ``/<test>/<name>`` (unique per test) and return its URL."""
    test = os.environ['PYTEST_CURRENT_TEST'].split('::')[-1].split(' ')[0]
    path = f'/{test}/{name}'
    server.files[path], server.modes[path] = data, mode
    return server.url(path)


def path_of(url: str) -> str:
    return '/' + url.split('/', 3)[3].split('#')[0]


@pytest.fixture(scope='module')
def refusing():
    """``refusing(name)``: a URL on 127.0.0.1 whose port refuses connections (a
    socket bound there without listening, held for the module, so that no
    other process can take the port meanwhile)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
        yield lambda name: f'http://127.0.0.1:{port}/{name}'


def assert_nothing_cached(hub, name: str) -> None:
    """Neither ``name`` nor a part of it is in the cache."""
    assert not (hub / name).exists() and not (hub / f'{name}.partial').exists()


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_download_once_then_offline(server, hub, micro):
    model, data = micro
    url = serve(server, 'micro.pth', data)
    loaded = load_checkpoint_file(url)
    assert_same_weights(loaded['state_dict'], model.state_dict())
    assert sorted(p.name for p in hub.iterdir()) == ['micro.pth', 'micro.pth.lock', 'micro.pth.url']
    assert (hub / 'micro.pth').read_bytes() == data
    assert len(server.requests_for(path_of(url))) == 1
    del server.files[path_of(url)]  # a request would fail now
    again = load_runner_checkpoint(url)
    assert_same_weights(again['state_dict'], model.state_dict())
    assert len(server.requests_for(path_of(url))) == 1


def test_file_placed_in_the_cache_is_used_offline(hub, micro, refusing):
    """A file fetched by torch / mmengine, or copied there, has no ``.url``."""
    hub.mkdir(parents=True)
    (hub / 'placed.pth').write_bytes(micro[1])
    loaded = load_checkpoint_file(refusing('placed.pth'))
    assert_same_weights(loaded['state_dict'], micro[0].state_dict())


def test_torch_hub_dir_is_honoured(server, hub, micro, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, '_hub_dir', None)
    torch.hub.set_dir(str(tmp_path / 'elsewhere'))  # undone by monkeypatch
    url = serve(server, 'set_dir.pth', micro[1])
    assert cached_download(url) == str(tmp_path / 'elsewhere' / 'checkpoints' / 'set_dir.pth')
    assert not hub.exists()


def interrupt(server, url: str) -> int:
    """Leave half of ``url``'s file as its ``.partial`` (a stalled transfer);
    returns the size reached."""
    server.modes[path_of(url)] = 'stall'
    with pytest.raises(CheckpointDownloadError, match='truncated'):
        cached_download(url, timeout=STALL_TIMEOUT)
    return len(server.files[path_of(url)]) // 2


def test_server_ignoring_range_restarts(server, hub, micro):
    data = micro[1]
    url = serve(server, 'no_range.pth', data)
    size = interrupt(server, url)
    server.modes[path_of(url)] = 'no_range'
    assert open(cached_download(url), 'rb').read() == data
    assert server.requests_for(path_of(url))[-1]['Range'] == f'bytes={size}-'
    assert len(server.requests_for(path_of(url))) == 2  # its 200 answer is used


def test_urls_sharing_a_file_name_keep_their_own_files(server, hub, micro):
    """QuadTree's classification and detection releases are both ``b2.pth``."""
    data, other = micro[1], micro[1][::-1]
    cls_url, det_url = serve(server, 'cls/b2.pth', data), serve(server, 'det/b2.pth', other)
    size = interrupt(server, det_url)
    assert (hub / 'b2.pth.partial').stat().st_size == size
    server.modes[path_of(det_url)] = 'ok'
    cls_path = cached_download(cls_url)  # a part of another URL is not continued
    assert 'Range' not in server.requests_for(path_of(cls_url))[0]
    det_path = cached_download(det_url)
    assert cls_path == str(hub / 'b2.pth') and det_path != cls_path
    assert open(cls_path, 'rb').read() == data and open(det_path, 'rb').read() == other
    assert (cached_download(cls_url), cached_download(det_url)) == (cls_path, det_path)
    assert len(server.requests_for(path_of(cls_url))) == 1
    assert len(server.requests_for(path_of(det_url))) == 2  # interrupted, then whole


def test_interrupted_download_leaves_only_the_partial(server, hub, micro):
    """A transfer that stalls (as a killed process, it stops mid-stream) leaves
    only ``.partial``, which the next call completes with a Range request."""
    data = micro[1]
    url = serve(server, 'stall.pth', data, mode='stall')
    with pytest.raises(CheckpointDownloadError,
                       match=rf'{re.escape(url)} truncated: got {len(data) // 2} of '
                             rf'{len(data)} bytes, then .*timed out.*kept and continued'):
        cached_download(url, timeout=STALL_TIMEOUT)
    assert not (hub / 'stall.pth').exists()
    assert (hub / 'stall.pth.partial').read_bytes() == data[:len(data) // 2]
    server.modes[path_of(url)] = 'ok'
    assert open(cached_download(url), 'rb').read() == data
    assert server.requests_for(path_of(url))[-1]['Range'] == f'bytes={len(data) // 2}-'


def test_truncated_download_is_an_error(server, hub, micro):
    data = micro[1]
    url = serve(server, 'short.pth', data, mode='truncate')
    with pytest.raises(CheckpointDownloadError,
                       match=rf'{re.escape(url)} truncated: got {len(data) // 2} of {len(data)} '):
        load_checkpoint_file(url)
    assert not (hub / 'short.pth').exists()  # the .partial is kept, to be continued


def test_sha256_checked(server, hub, micro):
    data = micro[1]
    digest = hashlib.sha256(data).hexdigest()
    url = serve(server, 'hashed.pth', data)
    with pytest.raises(CheckpointDownloadError,
                       match=rf'{re.escape(url)}#sha256=0{{64}}: sha256 mismatch: expected '
                             rf'0{{64}} \(from the #sha256= fragment\), got {digest}; the '
                             'download was discarded'):
        cached_download(url + '#sha256=' + '0' * 64)
    assert_nothing_cached(hub, 'hashed.pth')
    assert all('#' not in path for path, _ in server.requests)  # the fragment stays local
    assert open(cached_download(url + f'#sha256={digest}'), 'rb').read() == data
    # a cached file is checked too
    with pytest.raises(CheckpointDownloadError, match=r'cached file .*hashed\.pth.* Remove it'):
        cached_download(url, sha256='deadbeef')
    with pytest.raises(ValueError, match='not a sha256'):
        cached_download(url + '#sha256=xyz')


def test_hub_style_file_name_hash(server, hub, micro):
    data = micro[1]
    digest = hashlib.sha256(data).hexdigest()
    bad = serve(server, 'micro-deadbeef.pth', data)
    with pytest.raises(CheckpointDownloadError,
                       match=r'expected deadbeef \(from the file name\)'):
        load_checkpoint_file(bad)
    assert_nothing_cached(hub, 'micro-deadbeef.pth')
    good = serve(server, f'micro-{digest[:8]}.pth', data)
    assert os.path.basename(cached_download(good)) == f'micro-{digest[:8]}.pth'


def test_unreachable_host_fails_fast(hub, refusing):
    url = refusing('nowhere.pth')
    with pytest.raises(CheckpointDownloadError,
                       match=rf'cannot download {re.escape(url)}: no connection to the host '
                             r'.*refused'):
        load_checkpoint_file(url)
    assert_nothing_cached(hub, 'nowhere.pth')


def test_http_error_status(server, hub):
    url = server.url('/missing/none.pth')
    with pytest.raises(CheckpointDownloadError,
                       match=rf'cannot download {re.escape(url)}: HTTP 404'):
        load_runner_checkpoint(url)
    with pytest.raises(CheckpointError, match=rf'{re.escape(url)}: HTTP 404'):  # backbones' reader
        build_micro('PVTv2', init_cfg=dict(type='Pretrained', checkpoint=url))


@pytest.mark.parametrize('mode, seen', [('html', 'Content-Type: text/html'),
                                        ('html_as_binary', "starts with '<!DOCTYPE html")])
def test_html_page_is_refused(server, hub, micro, mode, seen):
    url = serve(server, f'{mode}.pth', micro[1], mode=mode)
    with pytest.raises(CheckpointDownloadError,
                       match=rf'cannot download {re.escape(url)}: the server sent an HTML '
                             rf'page.*{seen}.*nothing was cached'):
        load_checkpoint_file(url)
    assert_nothing_cached(hub, f'{mode}.pth')


def test_unreadable_download_names_its_url(server, hub):
    url = serve(server, 'garbage.pth', b'not a checkpoint at all')
    with pytest.raises(UnreadableCheckpointError,
                       match=rf'downloaded from {re.escape(url)}; remove it to download it '
                             r"again\).*it starts with b'not a checkpoint"):
        load_checkpoint_file(url)


def test_concurrent_callers_download_once(server, hub, micro):
    url = serve(server, 'shared.pth', micro[1], mode='slow')
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(cached_download(url)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(paths) == 4 and len(set(paths)) == 1
    assert len(server.requests_for(path_of(url))) == 1


def test_pretrained_init_cfg_by_url(server, hub, micro):
    model, data = micro
    url = serve(server, 'pretrained.pth', data)
    built = build_micro('PVTv2', init_cfg=dict(type='Pretrained', checkpoint=url))
    assert_same_weights(built.state_dict(), model.state_dict())


def test_runner_load_from_url(server, hub, micro, tmp_path):
    model, data = micro
    url = serve(server, 'runner.pth', data)
    fresh = build_micro('PVTv2')
    fresh.load_state_dict({k: torch.zeros_like(v) for k, v in fresh.state_dict().items()})
    runner = SafeRunner(model=fresh, work_dir=str(tmp_path / 'work'), load_from=url)
    runner.load_or_resume()
    assert_same_weights(runner.model.state_dict(), model.state_dict())


def test_untrusted_url_checkpoint_needs_trust(server, hub, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    buffer = io.BytesIO()
    torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': CustomMeta()}, buffer)
    url = serve(server, 'custom.pth', buffer.getvalue())
    with pytest.raises(UntrustedCheckpointError,
                       match=rf'--trust-checkpoint {re.escape(cache_path(url))}'):
        load_checkpoint_file(url)
    trust_checkpoint(url)  # what --trust-checkpoint URL does
    assert isinstance(load_runner_checkpoint(url)['meta'], CustomMeta)


def test_converters_take_urls(server, hub, tmp_path):
    rec = load_fixture(case_paths('pvtv2')[0])
    released = Path(write_released(rec, tmp_path))
    data = released.read_bytes()
    url = serve(server, released.name, data) + f'#sha256={hashlib.sha256(data).hexdigest()}'
    arch = repr(official_arch(rec, drop=('out_indices',)))
    load_tool('convert_checkpoint.py').main(
        [url, str(tmp_path / 'ours.pth'), '--family', 'pvtv2', '--arch', arch])
    load_tool('export_to_mmpretrain.py').main(
        [url, '--family', 'pvtv2', '--arch', arch, '--out-dir', str(tmp_path / 'out')])
    assert (tmp_path / 'ours.pth').is_file()
    assert (tmp_path / 'out' / f'{released.stem}_mmpretrain.pth').is_file()
    assert len(server.requests_for(path_of(url))) == 1

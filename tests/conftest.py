import functools
import importlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
import torch.utils.benchmark  # noqa: F401  (imports setuptools before any test loads the stdlib's distutils, which setuptools' shim then refuses)
from filelock import FileLock

import vattn_mm  # noqa: F401  (registers the backbones)


#: the most that `make test` holds under pytest's tmp_path at once (checkpoints and logs of the training
#: tests), measured, with a margin; the subsets that CI's compatibility jobs run need less
SUITE_DISK_GIB = 6


def pytest_sessionstart(session):
    """Stop at once, saying so, where the temporary folder's disk cannot
    hold what the training tests write: a full disk shows as hundreds of
    unrelated errors otherwise. ``VATTN_TEST_DISK_GIB`` sets the need."""
    if hasattr(session.config, 'workerinput'):
        return
    need = float(os.environ.get('VATTN_TEST_DISK_GIB', SUITE_DISK_GIB))
    where = session.config.option.basetemp or tempfile.gettempdir()
    while not os.path.exists(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free / 2**30
    if free < need:
        pytest.exit(f'{where} has {free:.1f} GiB free; the suite writes up to {need:g} GiB of checkpoints '
                    'and logs there: free space, point TMPDIR (or --basetemp) at a larger disk, or set '
                    'VATTN_TEST_DISK_GIB for a subset that needs less', returncode=3)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    """A module- or session-scoped fixture starts from seed 0 too: it is set
    up before the function-scoped seed above, after whatever tests ran
    before it on this worker, and its random weights or data must not
    depend on that order."""
    if fixturedef.scope != 'function':
        torch.manual_seed(0)


def _shared(tmp_path_factory, name: str, make) -> Path:
    """``make(directory)`` once for the whole run, also across pytest-xdist
    workers (the first one makes it under a lock, the others reuse it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get('PYTEST_XDIST_WORKER'):
        root = root.parent
    directory, done = root / name, root / f'{name}.done'
    with FileLock(str(root / f'{name}.lock')):
        if not done.exists():
            directory.mkdir(exist_ok=True)
            make(directory)
            done.write_text(json.dumps(str(directory)))
    return directory


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size) -> folder``: a tmpfs of ``size`` (``'256k'``, ``'512m'``) this
    test mounts (unmounted after it); skips where mounting is not permitted."""
    mounted = []

    def mount(size: str) -> Path:
        folder = tmp_path / f'tmpfs{len(mounted)}'
        folder.mkdir()
        done = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(folder)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f'mounting a tmpfs is not permitted here: {done.stderr.strip()}')
        mounted.append(folder)
        return folder
    yield mount
    for folder in mounted:
        subprocess.run(['umount', '-l', str(folder)], check=True)


@pytest.fixture(scope='session')
def demo_data(tmp_path_factory):
    """The demo dataset (8 training and 4 validation images of 128x128), made once a run."""
    from vattn_mm.datasets import make_demo_dataset
    return _shared(tmp_path_factory, 'demo_data',
                   lambda d: make_demo_dataset(d, num_train=8, num_val=4, size=128))


@pytest.fixture(scope='session')
def demo_trained(tmp_path_factory, demo_data):
    """``demo_trained(config) -> work dir``: a demo config trained 2 iterations on
    ``demo_data`` through tools/train.py, once a run per config; its
    ``last_checkpoint`` names the checkpoint. Tests read it and write elsewhere."""
    from .engine.test_training import train

    def get(config: str):
        return _shared(tmp_path_factory, f'trained_{Path(config).stem}',
                       lambda work: train(config, work, demo_data, 2))
    return get


#: what a ``needs`` marker names -> the module that must import for it
NEEDS = {'mmdet': 'mmdet.models', 'mmseg': 'mmseg.models', 'mmpretrain': 'mmpretrain.models',
         'mmcv.ops': 'mmcv.ops'}
#: set (to 1) where the whole stack is installed (`make test`, CI's pinned job): a
#: ``needs`` marker then never skips, so a broken install fails instead of skipping
FULL_STACK_ENV = 'VATTN_FULL_STACK'


@functools.lru_cache(maxsize=None)
def missing(name: str) -> str:
    """Why ``name`` (a key of NEEDS) cannot be used here, or ''."""
    try:
        importlib.import_module(NEEDS[name])
    except ImportError as err:
        return f'{name} does not import in this environment ({err})'
    return ''


def pytest_configure(config):
    """Under pytest-xdist each worker computes on one thread: the workers
    together use the cores instead of oversubscribing them."""
    if os.environ.get('PYTEST_XDIST_WORKER'):
        torch.set_num_threads(1)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` run first (a stable sort): under pytest-xdist
    the long runs then overlap the many short ones instead of ending the run
    on one worker while the other waits.  A test marked ``needs(...)`` is
    skipped where what it names does not import, unless $VATTN_FULL_STACK is
    set."""
    items.sort(key=lambda item: item.get_closest_marker('slow') is None)
    _check_xdist_groups(config, items)
    if os.environ.get(FULL_STACK_ENV):
        return
    for item in items:
        for marker in item.iter_markers('needs'):
            unknown = set(marker.args) - set(NEEDS)
            if unknown:
                raise pytest.UsageError(f'{item.nodeid}: needs{marker.args}: unknown {unknown}')
            reasons = [r for r in map(missing, marker.args) if r]
            if reasons:
                item.add_marker(pytest.mark.skip(reason='; '.join(reasons)))


def _check_xdist_groups(config, items) -> None:
    """Under ``--dist loadgroup`` pytest-xdist sends a test marked
    ``xdist_group(name)`` to its group's worker by suffixing its node id with
    ``@name`` in each worker; a pytest whose items ignore that suffix
    (pytest 9 with pytest-xdist 3.8) would spread the group over the workers
    without a word."""
    if not config.getoption('loadgroup', False):
        return
    for item in items:
        marker = item.get_closest_marker('xdist_group')
        if marker and '@' not in item.nodeid:
            raise pytest.UsageError(
                f'{item.nodeid}: its xdist_group {marker.args or marker.kwargs} is not in its node '
                f'id, so --dist loadgroup cannot keep the group on one worker (pytest '
                f'{pytest.__version__}; the pins in tools/constraints.txt work)')

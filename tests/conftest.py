import json
import os
from pathlib import Path

import pytest
import torch
import torch.utils.benchmark  # noqa: F401  (imports setuptools before any test loads the stdlib's distutils, which setuptools' shim then refuses)
from filelock import FileLock

import vattn_mm  # noqa: F401  (registers the backbones)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


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


def pytest_configure(config):
    """The ``slow`` marker; under pytest-xdist each worker computes on one
    thread: the workers together use the cores instead of oversubscribing them."""
    config.addinivalue_line('markers', 'slow: starts processes or trains models for tens of '
                            'seconds; first in the run, left out of `make test-quick`')
    if os.environ.get('PYTEST_XDIST_WORKER'):
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` run first (a stable sort): under pytest-xdist
    the long runs then overlap the many short ones instead of ending the run
    on one worker while the other waits."""
    items.sort(key=lambda item: item.get_closest_marker('slow') is None)

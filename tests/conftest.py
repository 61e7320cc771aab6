import pytest
import torch

import vattn_mm  # noqa: F401  (registers the backbones)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope='session')
def demo_data(tmp_path_factory):
    """The demo dataset (8 training and 4 validation images of 128x128), made once a session."""
    from vattn_mm.datasets import make_demo_dataset
    return make_demo_dataset(tmp_path_factory.mktemp('demo_data'), num_train=8, num_val=4, size=128)


@pytest.fixture(scope='session')
def demo_trained(tmp_path_factory, demo_data):
    """``demo_trained(config) -> work dir``: a demo config trained 2 iterations on
    ``demo_data`` through tools/train.py, once a session per config; its
    ``last_checkpoint`` names the checkpoint. Tests read it and write elsewhere."""
    from pathlib import Path

    from .test_training import train
    runs = {}

    def get(config: str):
        if config not in runs:
            work = tmp_path_factory.mktemp(Path(config).stem)
            train(config, work, demo_data, 2)
            runs[config] = work
        return runs[config]
    return get

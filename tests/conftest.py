import pytest
import torch

import vattn_mm  # noqa: F401  (registers the backbones)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield

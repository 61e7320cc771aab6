import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import vattn_mm  # noqa: E402,F401  (registers the backbones)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield

"""A new token mixer is one file: written here at test time, imported,
registered, it passes every per-mixer check of the suite (the contract the
registry-parametrized tests run for each mixer: declarations, forward and
backward at even and odd sizes, batch independence, bf16 and checkpointing,
inner width, scaling, MACs) without any list or backbone edited."""
import importlib.util
import sys

import pytest
from mmengine.registry import MODELS

from vattn_mm.layers import MIXERS
from vattn_mm.layers.builder import LAYERS

from . import mixer_contract as contract

NAME = 'ThrowawayGateMixer'
MIXER_FILE = '''
"""A throwaway token mixer: the tokens gated by a depthwise conv of the map."""
from typing import Optional

import torch
from torch import nn

from vattn_mm.layers import register_mixer
from vattn_mm.layers.tokens import map_to_tokens, tokens_to_map


@register_mixer
class ThrowawayGateMixer(nn.Module):
    """``proj(v * sigmoid(dwconv(v)))`` with ``v = in_proj(x)`` of
    ``gate_dims`` channels (default: the token width)."""

    scaling = 'linear'
    inner_width = 'gate_dims'

    def elementwise_macs(self, x_shape) -> int:
        """The gate product, one per token and gate channel."""
        b, n, _ = x_shape
        return b * n * self.gate_dims

    def __init__(self, embed_dims: int, kernel_size: int = 3,
                 gate_dims: Optional[int] = None):
        super().__init__()
        width = embed_dims if gate_dims is None else gate_dims
        if not isinstance(width, int) or width < 1:
            raise ValueError(f'ThrowawayGateMixer: gate_dims must be a positive int, '
                             f'got {gate_dims!r}')
        self.gate_dims = width
        self.in_proj = nn.Linear(embed_dims, width)
        self.dwconv = nn.Conv2d(width, width, kernel_size, padding=kernel_size // 2,
                                groups=width)
        self.proj = nn.Linear(width, embed_dims)

    def forward(self, x: torch.Tensor, hw) -> torch.Tensor:
        v = self.in_proj(x)
        gate, _ = map_to_tokens(self.dwconv(tokens_to_map(v, hw)))
        return self.proj(v * gate.sigmoid())
'''


@pytest.fixture(scope='module')
def new_mixer(tmp_path_factory):
    """The mixer file imported (which registers it), undone after."""
    path = tmp_path_factory.mktemp('new_mixer') / 'throwaway_gate.py'
    path.write_text(MIXER_FILE)
    spec = importlib.util.spec_from_file_location('throwaway_gate', path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield MIXERS[NAME]
    finally:
        MIXERS.pop(NAME, None)
        LAYERS.pop(NAME, None)
        MODELS._module_dict.pop(NAME, None)
        sys.modules.pop('throwaway_gate', None)


@pytest.mark.parametrize('check', [
    contract.check_declarations, contract.check_batch_independence,
    contract.check_bf16_and_cp, contract.check_inner_width, contract.check_linear_macs,
    contract.check_no_token_matrix, contract.check_macs])
def test_new_mixer_passes_the_contract(new_mixer, check):
    check(NAME)


@pytest.mark.parametrize('size', [(64, 64), (70, 90)], ids=['64x64', '70x90'])
def test_new_mixer_from_type_alone(new_mixer, size):
    contract.check_from_type_alone(NAME, size)


def test_new_mixer_is_listed_everywhere(new_mixer):
    """The registry and the complexity formulas see it."""
    from vattn_mm.analysis import declared_macs
    assert MODELS.get(NAME) is new_mixer
    assert new_mixer in declared_macs('elementwise_macs')


def test_bad_declarations_are_clear_errors():
    from torch import nn

    from vattn_mm.layers import register_mixer
    with pytest.raises(ValueError, match="scaling='linaer'"):
        register_mixer(type('BadScaling', (nn.Module, ), dict(scaling='linaer')))
    assert 'BadScaling' not in MIXERS

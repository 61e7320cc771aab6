"""Every registered position module, every mixer's position variant and every
tokeniser in the generic skeleton (TokenPyramid), built from its type alone:
forward and backward at even and odd sizes, batch independence, another grid
at test time than in training (the per-module checks:
``tests/layers/position_contract.py``)."""
import pytest
import torch
from mmengine.registry import MODELS
from torch import nn

from vattn_mm.layers import POSITIONS, TOKENISERS, register_position, register_tokeniser

from .position_contract import (CASES, check_batch_independence, check_forward_backward,
                                check_resolution_transfer, check_tells_positions_apart)

EXPECTED_POSITIONS = {'ConvPosEnc', 'PEG', 'AbsolutePosEmbed', 'SinCosPosEmbed', 'PixelAttention'}
EXPECTED_VARIANTS = {'ShiftedWindowAttention:swin_relative_bias',
                     'ShiftedWindowAttention:swin_v2_cpb', 'GlobalSelfAttention:cswin_lepe',
                     'MultiScalePoolingAttention:mvitv2_decomposed_rel_pos'}
EXPECTED_TOKENISERS = {'OverlapPatchEmbed', 'NonOverlapPatchEmbed', 'ConvStem',
                       'CeiTImageToTokens'}


def test_every_module_is_listed():
    assert EXPECTED_POSITIONS <= set(POSITIONS) and EXPECTED_TOKENISERS <= set(TOKENISERS)
    assert EXPECTED_VARIANTS <= set(CASES), sorted(CASES)
    for name, cls in {**POSITIONS, **TOKENISERS}.items():
        assert MODELS.get(name) is cls


@pytest.mark.parametrize('name', sorted(CASES))
@pytest.mark.parametrize('size', [(32, 48), (37, 53)], ids=['32x48', '37x53'])
def test_from_type_alone_forward_backward(name, size):
    check_forward_backward(name, size)


@pytest.mark.parametrize('name', sorted(CASES))
def test_batch_elements_are_independent(name):
    check_batch_independence(name)


@pytest.mark.parametrize('name', sorted(CASES))
def test_another_grid_at_test_time(name):
    check_resolution_transfer(name)


@pytest.mark.parametrize('name', sorted(POSITIONS))
def test_position_module_tells_positions_apart(name):
    check_tells_positions_apart(name)


def test_bad_declarations_are_clear_errors():
    with pytest.raises(ValueError, match="default_where='nowhere'"):
        register_position(type('BadWhere', (nn.Module, ), dict(default_where='nowhere')))
    with pytest.raises(ValueError, match="combine='concat'"):
        register_position(type('BadCombine', (nn.Module, ), dict(combine='concat')))
    with pytest.raises(ValueError, match='tokeniser_roles=None'):
        register_tokeniser(type('NoRoles', (nn.Module, ), {}))
    with pytest.raises(ValueError, match=r"tokeniser_roles=\('neck',\)"):
        register_tokeniser(type('BadRoles', (nn.Module, ), dict(tokeniser_roles=('neck', ))))
    assert not {'BadWhere', 'BadCombine', 'NoRoles', 'BadRoles'} & set(POSITIONS | TOKENISERS)


def test_in_place_gate_is_refused_under_autograd():
    from vattn_mm.layers import PixelAttention, apply_position
    pa = PixelAttention(8)
    x = torch.randn(1, 12, 8)
    with pytest.raises(RuntimeError, match='in-place position gates'):
        apply_position(pa, x, (3, 4), inplace=True)
    with torch.no_grad():
        torch.testing.assert_close(apply_position(pa, x.clone(), (3, 4), inplace=True),
                                   x * pa(x, (3, 4)))

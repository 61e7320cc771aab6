"""How each token mixer's cost grows with the number of tokens, on the
single-stage ``Mixer:<name>`` targets the benchmark measures: multiply-adds
and the largest tensor a mixer creates, shape-exact under FakeTensorMode
(no memory, no arithmetic), as each mixer declares (``scaling``,
``full_attention``, ``macs``, ``elementwise_macs``)."""
import pytest

from vattn_mm.analysis import build_spec
from vattn_mm.layers import MIXERS

from .mixer_contract import check_linear_macs, check_macs, check_no_token_matrix


@pytest.mark.parametrize('name', sorted(n for n, c in MIXERS.items()
                                        if getattr(c, 'scaling', None) == 'linear'))
def test_linear_mixers_cost_grows_linearly(name):
    check_linear_macs(name)


@pytest.mark.parametrize('name', sorted(n for n, c in MIXERS.items()
                                        if not getattr(c, 'full_attention', False)))
def test_no_mixer_forms_a_tokens_by_tokens_matrix(name):
    check_no_token_matrix(name)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_macs(name):
    check_macs(name)


def test_mixer_spec_errors_are_clear():
    with pytest.raises(ValueError, match='unknown mixer'):
        build_spec('Mixer:NoSuchAttention')
    with pytest.raises(ValueError, match='no ImageNet classifier'):
        build_spec('Mixer:LiteMLA', imagenet=True)

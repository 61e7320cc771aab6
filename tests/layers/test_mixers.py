"""Every registered token mixer in the generic skeleton (TokenPyramid): its
declarations, built from its type alone in every stage, forward and backward
at even and odd input sizes, mixed with another mixer (the per-mixer checks:
``tests/layers/mixer_contract.py``)."""
import pytest
import torch
from mmengine.registry import MODELS

from vattn_mm.layers import MIXERS, build_mixer

from .mixer_contract import (check_batch_independence, check_bf16_and_cp,
                                    check_declarations, check_from_type_alone,
                                    check_inner_width, micro)

EXPECTED_MIXERS = {
    'SpatialReductionAttention', 'PyramidPoolingAttention', 'QuadtreeAttention',
    'HiLoAttention', 'MultiScaleDilatedAttention', 'GlobalSelfAttention', 'FocalModulation',
    'AgentAttention', 'EfficientMultiHeadAttention', 'ExternalAttention', 'LiteMLA',
    'MultiScalePoolingAttention', 'ShiftedWindowAttention'}


def test_every_mixer_is_listed():
    assert EXPECTED_MIXERS <= set(MIXERS), sorted(MIXERS)
    for name, cls in MIXERS.items():
        assert MODELS.get(name) is cls


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_declarations(name):
    check_declarations(name)


@pytest.mark.parametrize('name', sorted(MIXERS))
@pytest.mark.parametrize('size', [(64, 64), (70, 90)], ids=['64x64', '70x90'])
def test_mixer_from_type_alone_in_every_stage(name, size):
    check_from_type_alone(name, size)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_batch_elements_are_independent(name):
    check_batch_independence(name)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_under_bf16_autocast_and_with_cp(name):
    check_bf16_and_cp(name)


@pytest.mark.parametrize('name', sorted(n for n, c in MIXERS.items()
                                        if getattr(c, 'inner_width', None)))
def test_mixer_inner_width_option(name):
    check_inner_width(name)


def test_dilated_bands_with_a_wider_inner_width():
    """MSDA's banded inference writes the projected bands into a separate
    output when the inner width is not the token width: equal to no bands."""
    mixer = build_mixer(dict(type='MultiScaleDilatedAttention', attn_dims=48),
                        embed_dims=24, num_heads=3, stage=0).eval()
    x, hw = torch.randn(2, 15 * 13, 24), (15, 13)
    with torch.no_grad():
        mixer.chunk_tokens = None
        whole = mixer(x, hw)
        mixer.chunk_tokens = 40
        banded = mixer(x, hw)
    torch.testing.assert_close(banded, whole, rtol=1e-5, atol=1e-6)


def test_stage_defaults_follow_the_papers():
    model = micro(dict(type='SpatialReductionAttention'))
    assert [s.blocks[0].attn.window for s in model.stages] == [8, 4, 2, 1]
    model = micro(dict(type='PyramidPoolingAttention'))
    assert model.stages[3].blocks[0].attn.pool_ratios == (1, 2, 3, 4)
    assert len(model.stages[0].pool_convs) == 4           # shared by the stage's blocks
    assert 'pool_convs' not in dict(model.stages[1].blocks[0].named_children())
    model = micro(dict(type='QuadtreeAttention'))
    assert [s.blocks[0].attn.num_levels for s in model.stages] == [4, 3, 2, 1]
    assert model.size_multiple == 32
    model = micro(dict(type='HiLoAttention', alpha=0.5))   # config values win
    assert [s.blocks[0].attn.ws for s in model.stages] == [2, 2, 2, 1]
    assert model.stages[1].blocks[0].attn.l_heads == 1


def test_two_mixers_in_one_pyramid_train_a_step():
    model = micro([dict(type='SpatialReductionAttention', sr_ratio=4),
                   dict(type='SpatialReductionAttention', sr_ratio=2),
                   dict(type='HiLoAttention'), dict(type='FocalModulation')]).train()
    kinds = [type(s.blocks[0].attn).__name__ for s in model.stages]
    assert kinds == ['SpatialReductionAttention', 'SpatialReductionAttention',
                     'HiLoAttention', 'FocalModulation']
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(2, 3, 64, 64)
    before = [p.detach().clone() for p in model.parameters()]
    # (not the outputs' means: through an output LayerNorm their gradient is zero)
    torch.manual_seed(0)
    sum((o * torch.randn_like(o)).sum() for o in model(x)).backward()
    assert all(p.grad.abs().max() > 1e-4 for p in model.parameters())
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_ffn_only_stage_position_module_and_layer_scale():
    model = micro([None, dict(type='GlobalSelfAttention'), None, None],
                  position=dict(type='ConvPosEnc'), layer_scale=1e-2, out_norm_cfg=None)
    assert not model.stages[0].blocks[0].has_mixer
    assert model.stages[1].blocks[1].pos_embed.kernel_size == (3, 3)
    assert torch.allclose(model.stages[1].blocks[0].ls1.weight, torch.full((32, ), 1e-2))
    peg = micro(dict(type='SpatialReductionAttention'),
                position=dict(type='ConvPosEnc', where='after_first_block'))
    assert peg.stages[1].has_position and not peg.stages[1].blocks[0].has_position
    outs = peg(torch.randn(1, 3, 64, 64))
    assert len(outs) == 4


def test_bad_mixer_configs_are_clear_errors():
    with pytest.raises(KeyError, match="mixer type 'NoSuchAttention' is not registered"):
        micro(dict(type='NoSuchAttention'))
    with pytest.raises(ValueError, match='mixer has 3 entries but there are 4 stages'):
        micro([dict(type='HiLoAttention')] * 3)
    with pytest.raises(TypeError, match='mixer config must be a dict with a "type"'):
        micro([dict(sr_ratio=2)] * 4)
    with pytest.raises(ValueError, match="where='everywhere'"):
        micro(dict(type='HiLoAttention'), position=dict(type='ConvPosEnc', where='everywhere'))

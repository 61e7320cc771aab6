"""Every registered token mixer in the generic skeleton (TokenPyramid): built
from its type alone in every stage, forward and backward at even and odd
input sizes, mixed with another mixer, and a new mixer added without
touching the backbones."""
import math

import pytest
import torch
from mmengine.registry import MODELS
from torch import nn

from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import MIXERS, build_mixer, register_mixer
from vattn_mm.layers.patch_embed import Size

MICRO = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1])
EXPECTED_MIXERS = {
    'SpatialReductionAttention', 'PyramidPoolingAttention', 'QuadtreeAttention',
    'HiLoAttention', 'MultiScaleDilatedAttention', 'GlobalSelfAttention', 'FocalModulation',
    'AgentAttention', 'EfficientMultiHeadAttention', 'ExternalAttention', 'LiteMLA',
    'MultiScalePoolingAttention', 'ShiftedWindowAttention'}


def micro(mixer, **kwargs) -> TokenPyramid:
    model = TokenPyramid(MICRO, mixer=mixer, drop_path_rate=0., **kwargs)
    model.init_weights()
    return model


def test_every_mixer_is_listed():
    assert EXPECTED_MIXERS <= set(MIXERS), sorted(MIXERS)
    for name, cls in MIXERS.items():
        assert MODELS.get(name) is cls


@pytest.mark.parametrize('name', sorted(MIXERS))
@pytest.mark.parametrize('size', [(64, 64), (70, 90)], ids=['64x64', '70x90'])
def test_mixer_from_type_alone_in_every_stage(name, size):
    model = micro(dict(type=name)).train()
    x = torch.randn(2, 3, *size, requires_grad=True)
    outs = model(x)
    assert [o.shape for o in outs] == [
        (2, c, math.ceil(size[0] / s), math.ceil(size[1] / s))
        for c, s in zip(MICRO['embed_dims'], (4, 8, 16, 32))]
    sum(o.square().mean() for o in outs).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for key, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), key
    mixers = [stage.blocks[0].attn for stage in model.stages]
    assert all(type(m) is MIXERS[name] for m in mixers)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_batch_elements_are_independent(name):
    model = micro(dict(type=name)).eval()
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        both = model(x)
        first = model(x[:1])
    for a, b in zip(both, first):
        torch.testing.assert_close(a[:1], b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_under_bf16_autocast_and_with_cp(name):
    """Forward and backward under CPU bf16 autocast stay finite and near the
    float32 outputs; activation checkpointing gives the same gradients."""
    model = micro(dict(type=name)).train()
    x = torch.randn(1, 3, 64, 64)
    ref = model(x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    sum(o.float().square().mean() for o in outs).backward()
    for out, want in zip(outs, ref):
        assert torch.isfinite(out).all()
        assert (out.float() - want).abs().max() <= 0.1 * want.abs().max() + 0.05
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

    grads = []
    for with_cp in (False, True):
        model.zero_grad()
        model.with_cp = with_cp
        inp = x.clone().requires_grad_()
        sum(o.square().mean() for o in model(inp)).backward()
        grads.append([inp.grad] + [p.grad.clone() for p in model.parameters()])
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, rtol=1e-5, atol=1e-6)


#: the option that sets a mixer's query / key / value width (its inner width)
WIDTH_OPTION = {name: 'attn_dims' for name in (
    'SpatialReductionAttention', 'PyramidPoolingAttention', 'QuadtreeAttention',
    'HiLoAttention', 'MultiScaleDilatedAttention', 'GlobalSelfAttention',
    'EfficientMultiHeadAttention', 'MultiScalePoolingAttention', 'ShiftedWindowAttention')}
WIDTH_OPTION['FocalModulation'] = 'modulation_dims'


@pytest.mark.parametrize('name', sorted(WIDTH_OPTION))
def test_mixer_inner_width_option(name):
    """A wider inner width (what the attention zoo matches parameters with)
    keeps the token shapes, adds exactly the projections' parameters, trains,
    and the explicit default width is the default module."""
    option = WIDTH_OPTION[name]
    default = micro(dict(type=name))
    same = micro(dict(type=name, **{option: None}))
    assert {k: v.shape for k, v in default.state_dict().items()} == \
        {k: v.shape for k, v in same.state_dict().items()}
    wide = micro([dict(type=name, **{option: 2 * c}) for c in MICRO['embed_dims']]).train()
    assert sum(p.numel() for p in wide.parameters()) > sum(p.numel() for p in default.parameters())
    x = torch.randn(1, 3, 70, 90)
    outs = wide(x)
    assert [o.shape[1] for o in outs] == MICRO['embed_dims']
    sum(o.square().mean() for o in outs).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in wide.parameters())
    with pytest.raises(ValueError, match=option):
        build_mixer(dict(type=name, **{option: 0}), embed_dims=32, num_heads=2, stage=0)


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


def test_a_new_mixer_needs_no_backbone_change():
    @register_mixer
    class ChannelGateMixer(nn.Module):
        """A mixer defined outside the package: a per-channel gate."""

        def __init__(self, embed_dims: int, hidden: int = 4):
            super().__init__()
            self.gate = nn.Sequential(nn.Linear(embed_dims, hidden), nn.ReLU(),
                                      nn.Linear(hidden, embed_dims))

        def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
            return x * self.gate(x.mean(1, keepdim=True)).sigmoid()

    try:
        model = micro(dict(type='ChannelGateMixer'))
        assert type(model.stages[2].blocks[0].attn) is ChannelGateMixer
        assert len(model(torch.randn(1, 3, 32, 32))) == 4
        assert isinstance(build_mixer(dict(type='ChannelGateMixer', hidden=2), 8).gate[0],
                          nn.Linear)
    finally:
        MODELS._module_dict.pop('ChannelGateMixer')
        MIXERS.pop('ChannelGateMixer')

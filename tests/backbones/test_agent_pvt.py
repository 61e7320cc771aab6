"""Agent-PVT-specific behaviour (position-table resizing, agent grids, floor
sizes, gradients); the contract every backbone follows is in
test_backbones.py."""
import math

import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import AgentPVT, TokenPyramid, build_backbone
from vattn_mm.layers import AbsolutePosEmbed, AgentAttention

from ..backbone_cases import CASES
from ..golden import case_paths, read_key_list

MICRO = CASES['AgentPVT'].micro


def micro(**arch) -> AgentPVT:
    model = AgentPVT(dict(MICRO, **arch), drop_path_rate=0.)
    model.init_weights()
    return model.eval()


def explicit_resize(table: torch.Tensor, grid, hw) -> torch.Tensor:
    """The [1, N, C] table as a grid, resized bilinearly to ``hw``, as tokens."""
    as_map = table.reshape(1, *grid, -1).permute(0, 3, 1, 2)
    resized = F.interpolate(as_map, size=hw, mode='bilinear', align_corners=False)
    return resized.flatten(2).transpose(1, 2)


def stage_inputs(model: AgentPVT, x: torch.Tensor) -> list:
    """(tokens after the patch embedding, grid, tokens the first block gets) per stage."""
    seen = []
    hooks = [stage.blocks[0].register_forward_pre_hook(
        lambda m, args: seen.append(args[0].clone())) for stage in model.stages]
    embeds = []
    hooks += [stage.patch_embed.register_forward_hook(
        lambda m, args, out: embeds.append((out[0].clone(), out[1]))) for stage in model.stages]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return [(e, hw, s) for (e, hw), s in zip(embeds, seen)]


def test_golden_cases_present():
    assert {p.stem for p in case_paths('agent_pvt')} >= {'micro_a', 'micro_odd100x150'}


@pytest.mark.parametrize('arch', sorted(AgentPVT.arch_zoo))
def test_released_parameter_counts(arch):
    header, _ = read_key_list(f'agent_pvt_{arch}')
    with torch.device('meta'):
        model = AgentPVT(arch)
    ours = sum(p.numel() for p in model.parameters())
    assert ours == int(header['total_params']) - int(header['head_params'])


def test_pos_embed_resized_for_same_token_count_other_aspect():
    """The official dense code adds the stored table unchanged whenever a grid
    has the stage-1 training token count: a 8x32 grid (256 tokens, like the
    16x16 training grid) would get the 16x16 table laid out row by row.  Ours
    resizes it; and the term is the stored table only on the training grid."""
    pe = AbsolutePosEmbed(6, 16)
    with torch.no_grad():
        pe.pos_embed.normal_()
        same = pe(torch.zeros(1, 256, 6), (16, 16))
        other = pe(torch.zeros(1, 256, 6), (8, 32))
    assert torch.equal(same, pe.pos_embed)
    assert torch.allclose(other, explicit_resize(pe.pos_embed, (16, 16), (8, 32)), atol=1e-6)
    assert (other - pe.pos_embed).abs().max() > 0.1     # what the official code would add


def test_pos_embed_resize_in_every_stage():
    """In the backbone: img_size 64 -> training grids 16/8/4/2.  A 32x128 image
    gives stage 1 the training token count at another aspect ratio (official:
    mis-laid table) and a 128x128 image gives stage 2 that count (official:
    shape error); each stage must add its own table resized to its grid."""
    model = micro()
    for size in ((32, 128), (128, 128)):
        for i, (embedded, hw, first) in enumerate(stage_inputs(model, torch.randn(1, 3, *size))):
            pe = model.stages[i].position
            expected = embedded + explicit_resize(pe.pos_embed, pe.grid_size, hw)
            assert torch.allclose(first, expected, atol=1e-5), (size, i, hw)


def test_position_table_in_any_token_pyramid():
    """By config in the generic skeleton: one table per stage, after the embedding."""
    micro_pyramid = dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4],
                         mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1])
    model = TokenPyramid(micro_pyramid, position=[
        dict(type='AbsolutePosEmbed', grid_size=g) for g in (16, 8, 4, 2)]).eval()
    assert [s.position_where for s in model.stages] == ['embed'] * 4
    assert 'stages.3.position.pos_embed' in model.state_dict()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 96))
    assert [tuple(o.shape[2:]) for o in outs] == [(16, 24), (8, 12), (4, 6), (2, 3)]


def test_position_module_where_embed_and_bad_grid():
    assert AbsolutePosEmbed.default_where == 'embed'
    stage = micro().stages[0]
    assert stage.has_position and stage.position_where == 'embed'
    assert not any(b.has_position for b in stage.blocks)
    with pytest.raises(ValueError, match='grid_size must be'):
        AbsolutePosEmbed(8, (4, 0))


def test_agent_shapes_dense_and_imagenet():
    model = AgentPVT('tiny')
    mixers = [stage.blocks[0].attn for stage in model.stages]
    assert all(isinstance(m, AgentAttention) for m in mixers)
    assert [m.agent_shape for m in mixers] == [(12, 12), (16, 16), (28, 28), (28, 28)]
    assert [m.agent_grid for m in mixers] == [(3, 3), (4, 4), (7, 7), (7, 7)]
    assert [m.sr_ratio for m in mixers] == [1, 1, 1, 1]
    cls = build_backbone('agent_pvt', 'tiny', imagenet=True, device='meta')
    assert [s.blocks[0].attn.agent_shape for s in cls.stages] == [(3, 3), (4, 4), (7, 7), (7, 7)]
    grids = [s.position.grid_size for s in AgentPVT('medium_256', init_cfg=None).stages]
    assert grids == [(64, 64), (32, 32), (16, 16), (8, 8)]


def test_bad_attn_type_and_agent_sr_ratios_are_clear_errors():
    with pytest.raises(ValueError, match=r"attn_type must be 'AAAA'.*got 'BBBB'"):
        AgentPVT(dict(MICRO, attn_type='BBBB'))
    with pytest.raises(ValueError, match=r"attn_type must be 'AAAA'.*got 'AABA'"):
        AgentPVT(dict(MICRO, attn_type='AABA'))
    with pytest.raises(ValueError, match='agent_sr_ratios'):
        AgentPVT(dict(MICRO, agent_sr_ratios='111'))
    with pytest.raises(ValueError, match='agent_num must be a positive square'):
        AgentPVT(dict(MICRO, agent_num=[4, 8, 16, 16]))
    with pytest.raises(ValueError, match=r"downstream_agent_shapes'\] has 3 entries"):
        AgentPVT(dict(MICRO, downstream_agent_shapes=[[3, 3]] * 3))


@pytest.mark.parametrize('size,grids', [
    ((100, 150), [(25, 37), (12, 18), (6, 9), (3, 4)]),
    ((67, 45), [(16, 11), (8, 5), (4, 2), (2, 1)]),
    ((32, 33), [(8, 8), (4, 4), (2, 2), (1, 1)]),     # stage 4: 1 token, 25 agents
])
def test_floor_grids_and_tiny_last_stage(size, grids):
    model = micro()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    assert [tuple(o.shape[2:]) for o in outs] == grids
    assert all(torch.isfinite(o).all() for o in outs)


def test_too_small_input_is_a_clear_error():
    model = micro()
    with pytest.raises(ValueError, match='at least 32 px'):
        model(torch.randn(1, 3, 31, 64))
    assert micro().min_input_size == 32
    assert AgentPVT(MICRO, out_indices=(0, 1)).min_input_size == 8


def test_input_gradient_matches_finite_differences():
    """Directional derivatives of a weighted sum of all outputs (float64):
    autograd vs central differences, on an odd-sized input."""
    torch.manual_seed(0)
    model = micro().double()
    x = torch.randn(1, 3, 37, 45, dtype=torch.float64, requires_grad=True)
    weights = [torch.randn(o.shape, dtype=torch.float64) for o in model(x.detach())]

    def loss(inp):
        return sum((o * w).sum() for o, w in zip(model(inp), weights))

    grad, = torch.autograd.grad(loss(x), x)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    eps = 1e-6
    with torch.no_grad():
        for _ in range(3):
            d = torch.randn_like(x)
            numeric = (loss(x + eps * d) - loss(x - eps * d)) / (2 * eps)
            analytic = (grad * d).sum()
            assert math.isclose(numeric.item(), analytic.item(), rel_tol=1e-5, abs_tol=1e-8)


def test_every_parameter_gets_a_gradient():
    """Position tables and all six agent biases reach the outputs."""
    model = micro().train()
    sum(o.square().mean() for o in model(torch.randn(2, 3, 48, 80))).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert not missing, missing


def test_agent_shapes_argument_replaces_the_dense_grids():
    model = AgentPVT(MICRO, agent_shapes=[(2, 2), (3, 3), (4, 4), (4, 4)], drop_path_rate=0.)
    grids = [stage.blocks[0].attn.agent_shape for stage in model.stages]
    assert grids == [(2, 2), (3, 3), (4, 4), (4, 4)]
    assert model.arch['downstream_agent_shapes'] == grids
    with pytest.raises(ValueError, match='agent_shapes has 2 entries but there are 4 stages'):
        AgentPVT(MICRO, agent_shapes=[(2, 2), (3, 3)])

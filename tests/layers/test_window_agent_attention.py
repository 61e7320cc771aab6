"""ShiftedWindowAttention (Swin) and AgentAttention (Agent-PVT): equal to the
official modules' golden fixtures after loading their weights, gradients and
sizes the official modules refuse checked against literal references written
here (loops and einsums), Swin's W-MSA / SW-MSA alternation in a pyramid,
and clear errors."""
import math

import pytest
import torch
import torch.nn.functional as F

from tests.golden import GOLDEN, load_fixture, official_arch
from ..golden import swin_attention, swin_block
from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import AgentAttention, ShiftedWindowAttention, build_mixer

SWIN_CASE = GOLDEN / 'mixers' / 'swin_shifted_block.pt'
AGENT_CASE = GOLDEN / 'mixers' / 'agent_attention.pt'


def assert_matches(out, ref, what):
    err = (out - ref).abs().max().item()
    assert err <= 1e-4 * max(1., ref.abs().max().item()), f'{what}: max |diff| {err}'


def assert_same_grads(module, x, reference, hw):
    """Forward + backward of the module and of ``reference(module, x, hw)``
    with the same random output weights; outputs and all gradients match."""
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    weights = torch.randn(x.shape[0], math.prod(hw), module.proj.out_features)
    out = module(x1, hw)
    (out * weights).sum().backward()
    grads = {k: p.grad.clone() for k, p in module.named_parameters()}
    module.zero_grad()
    ref = reference(module, x2, hw)
    (ref * weights).sum().backward()
    assert_matches(out, ref, 'output')
    assert_matches(x1.grad, x2.grad, 'grad input')
    for key, p in module.named_parameters():
        assert_matches(grads[key], p.grad, f'grad {key}')
        assert grads[key].abs().sum() > 0, key


# --------------------------------------------------------------- Swin
def swin_reference(m: ShiftedWindowAttention, x, hw):
    """Literal shifted-window attention: pad, roll, and per window build the
    relative-position bias and the region mask token pair by token pair."""
    b, n, c = x.shape
    h, w = hw
    ms, s, heads = m.window_size, m.shift_size, m.num_heads
    d = c // heads
    hp, wp = -(-h // ms) * ms, -(-w // ms) * ms
    grid = x.new_zeros(b, hp, wp, c)
    grid[:, :h, :w] = x.view(b, h, w, c)
    grid = torch.roll(grid, (-s, -s), dims=(1, 2))
    q, k, v = (grid @ m.qkv.weight.T + m.qkv.bias).view(b, hp, wp, 3, heads, d).unbind(3)

    def region(i, size):  # region of a row / column of the shifted padded map
        return 0 if i < size - ms else (1 if i < size - s else 2)

    cells = [(i, j) for i in range(ms) for j in range(ms)]
    index = torch.tensor([[(qi - ki + ms - 1) * (2 * ms - 1) + (qj - kj + ms - 1)
                           for ki, kj in cells] for qi, qj in cells])
    rel_bias = m.relative_position_bias_table[index].permute(2, 0, 1)  # (heads, M*M, M*M)
    out = torch.zeros_like(q)
    for y0 in range(0, hp, ms):
        for x0 in range(0, wp, ms):
            mask = torch.zeros(ms * ms, ms * ms)
            if s:
                labels = [(region(y0 + i, hp), region(x0 + j, wp)) for i, j in cells]
                mask = torch.tensor([[0. if a == bb else -100. for bb in labels] for a in labels])
            qw, kw, vw = (t[:, y0:y0 + ms, x0:x0 + ms].reshape(b, ms * ms, heads, d)
                          for t in (q, k, v))
            logits = torch.einsum('bqhd,bkhd->bhqk', qw * d ** -0.5, kw) + rel_bias + mask
            ow = torch.einsum('bhqk,bkhd->bqhd', logits.softmax(-1), vw)
            out[:, y0:y0 + ms, x0:x0 + ms] = ow.reshape(b, ms, ms, heads, d)
    out = torch.roll(out.reshape(b, hp, wp, c), (s, s), dims=(1, 2))[:, :h, :w]
    return out.reshape(b, n, c) @ m.proj.weight.T + m.proj.bias


def test_swin_equals_official_block():
    rec = load_fixture(SWIN_CASE)
    sd, arch = rec['checkpoint'], rec['arch']
    m = swin_attention(rec).eval()
    hw, c = tuple(arch['input_resolution']), arch['dim']
    s, ms = arch['shift_size'], arch['window_size']
    x = rec['input']
    with torch.no_grad():
        y, branch = swin_block(rec, m, x)
    assert_matches(y, rec['outputs'][0], 'block output')
    # the attention branch in the shifted frame, windows row-major = official WindowAttention output
    shifted = torch.roll(branch.view(1, *hw, c), (-s, -s), dims=(1, 2))
    windows = shifted.view(1, hw[0] // ms, ms, hw[1] // ms, ms, c).transpose(2, 3)
    windows = windows.reshape(-1, ms * ms, c)
    assert_matches(windows, rec['extra_outputs']['attn_windows'], 'attention windows')
    # the region mask equals the official buffer
    torch.testing.assert_close(m.region_mask(hw, x.device).squeeze(1), sd['attn_mask'],
                               rtol=0, atol=0)


def test_swin_loads_official_buffers_strictly():
    rec = load_fixture(SWIN_CASE)
    attn = {k[len('attn.'):]: v for k, v in rec['checkpoint'].items() if k.startswith('attn.')}
    assert 'relative_position_index' in attn
    m = ShiftedWindowAttention(32, 2, shift_size=3)
    m.load_state_dict(attn)  # the recomputed index buffer is accepted and dropped
    assert set(m.state_dict()) == {k for k in attn if k != 'relative_position_index'}
    torch.testing.assert_close(m.relative_position_index, attn['relative_position_index'])


@pytest.mark.parametrize('hw, window, shift',
                         [((14, 14), 7, 3), ((10, 13), 7, 3), ((5, 8), 3, 1), ((4, 6), 3, 0)],
                         ids=['official', 'pad7-shift3', 'pad3-shift1', 'pad3-noshift'])
def test_swin_gradients_and_any_size(hw, window, shift):
    torch.manual_seed(0)
    m = ShiftedWindowAttention(12, 3, window_size=window, shift_size=shift)
    with torch.no_grad():
        m.relative_position_bias_table.normal_()
    assert_same_grads(m, torch.randn(2, math.prod(hw), 12), swin_reference, hw)


def test_swin_mask_cached_per_size():
    m = ShiftedWindowAttention(8, 2, window_size=4, shift_size=2)
    for hw in [(5, 7), (8, 8), (5, 7)]:
        m(torch.randn(1, math.prod(hw), 8), hw)
    assert [k[:2] for k in m._masks] == [(8, 8)]  # 5x7 pads to 8x8 as well
    m(torch.randn(1, 9 * 3, 8), (9, 3))
    assert {k[:2] for k in m._masks} == {(8, 8), (12, 4)}


def test_swin_alternates_shift_in_a_pyramid():
    arch = dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                depths=[2, 3, 1, 1])
    model = TokenPyramid(arch, mixer=dict(type='ShiftedWindowAttention'))
    shifts = [[blk.attn.shift_size for blk in stage.blocks] for stage in model.stages]
    assert shifts == [[0, 3], [0, 3, 0], [0], [0]]
    model = TokenPyramid(arch, mixer=dict(type='ShiftedWindowAttention', window_size=4))
    assert [blk.attn.shift_size for blk in model.stages[1].blocks] == [0, 2, 0]
    # a value in the config applies to every block
    model = TokenPyramid(arch, mixer=dict(type='ShiftedWindowAttention', shift_size=0))
    assert all(blk.attn.shift_size == 0 for stage in model.stages for blk in stage.blocks)
    assert build_mixer(dict(type='ShiftedWindowAttention'), 8, 2, block=5).shift_size == 3


@pytest.mark.parametrize('shift', [0, 2])
def test_swin_without_position_bias(shift):
    """``position_bias='none'``: the attention of a zero table, no parameters for it."""
    torch.manual_seed(0)
    plain = ShiftedWindowAttention(12, 3, window_size=4, shift_size=shift, position_bias='none')
    assert not any('relative' in k for k in plain.state_dict())
    table = ShiftedWindowAttention(12, 3, window_size=4, shift_size=shift)
    table.load_state_dict({**plain.state_dict(),
                           'relative_position_bias_table': torch.zeros(49, 3)})
    x = torch.randn(2, 6 * 7, 12)
    assert_matches(plain(x, (6, 7)), table(x, (6, 7)), 'output')


@pytest.mark.parametrize('shift', [0, 2])
def test_swin_resize_window_moves_a_trained_table(shift):
    """A table moved from 4 x 4 to 8 x 8 windows is resized bicubically
    (constant heads stay constant) and the module then computes window
    attention at the new window (the literal reference), shift scaled."""
    torch.manual_seed(0)
    m = ShiftedWindowAttention(12, 3, window_size=4, shift_size=shift)
    with torch.no_grad():
        m.relative_position_bias_table.normal_()
        m.relative_position_bias_table[:, 0] = 0.7
    m(torch.randn(1, 8 * 8, 12), (8, 8))            # a cached mask of the old window
    m.resize_window(8)
    assert (m.window_size, m.shift_size) == (8, 2 * shift)
    assert m.relative_position_bias_table.shape == (15 * 15, 3)
    torch.testing.assert_close(m.relative_position_bias_table[:, 0], torch.full((225,), 0.7))
    assert_same_grads(m, torch.randn(2, 10 * 12, 12), swin_reference, (10, 12))
    with pytest.raises(ValueError, match='window_size must be an int >= 1'):
        m.resize_window(0)


def test_swin_resize_window_evaluates_the_cpb_at_new_offsets():
    """Swin v2's transfer: the CPB of a 4 x 4 window moved to 8 x 8 equals a
    CPB built for window 8 with ``pretrained_window_size=4`` and the same MLP."""
    torch.manual_seed(0)
    m = ShiftedWindowAttention(12, 3, window_size=4, position_bias='cpb', cpb_hidden_dims=16)
    moved = ShiftedWindowAttention(12, 3, window_size=8, position_bias='cpb',
                                   pretrained_window_size=4, cpb_hidden_dims=16)
    moved.load_state_dict(m.state_dict())
    m.resize_window(8)
    x = torch.randn(1, 16 * 16, 12)
    torch.testing.assert_close(m(x, (16, 16)), moved(x, (16, 16)), rtol=0, atol=0)
    m.resize_window(4)                                # and back: the trained window's offsets
    fresh = ShiftedWindowAttention(12, 3, window_size=4, position_bias='cpb', cpb_hidden_dims=16)
    fresh.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x, (16, 16)), fresh(x, (16, 16)), rtol=0, atol=0)


@pytest.mark.parametrize('kwargs, message', [
    (dict(embed_dims=10, num_heads=3), 'not divisible by num_heads'),
    (dict(window_size=0), 'window_size must be >= 1'),
    (dict(window_size=7, shift_size=7), 'shift_size must be'),
    (dict(shift_size='alternate'), 'shift_size must be'),
    (dict(position_bias='rope'), "position_bias='rope'"),
])
def test_swin_bad_arguments(kwargs, message):
    args = {**dict(embed_dims=12, num_heads=3), **kwargs}
    with pytest.raises(ValueError, match=message):
        ShiftedWindowAttention(**args)


# --------------------------------------------------------------- Agent
def resize_matrix(n_in, n_out):
    """(n_out, n_in) bilinear weights, align_corners=False, written out."""
    r = torch.zeros(n_out, n_in)
    for o in range(n_out):
        src = max((o + 0.5) * n_in / n_out - 0.5, 0.)
        i0 = min(int(src), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        frac = src - i0
        r[o, i0] += 1 - frac
        r[o, i1] += frac
    return r


def pool_matrix(n_in, n_out):
    """(n_out, n_in) adaptive average pooling weights, written out."""
    p = torch.zeros(n_out, n_in)
    for o in range(n_out):
        start, end = (o * n_in) // n_out, -(-((o + 1) * n_in) // n_out)
        p[o, start:end] = 1. / (end - start)
    return p


def resize2d(t, hw):
    """Resize the last two axes of ``t`` to ``hw``."""
    return torch.einsum('yi,...ij,xj->...yx', resize_matrix(t.shape[-2], hw[0]), t,
                        resize_matrix(t.shape[-1], hw[1]))


def agent_reference(m: AgentAttention, x, hw):
    """Literal agent attention with the official two-step bias resizing."""
    b, n, c = x.shape
    h, w = hw
    heads, sr = m.num_heads, m.sr_ratio
    d = c // heads
    (ay, ax), p = m.agent_shape, m.agent_grid[0]
    scale = d ** -0.5
    q = x @ m.q.weight.T + m.q.bias
    src, kv_hw = x, hw
    if sr > 1:
        kv_map = F.conv2d(x.transpose(1, 2).reshape(b, c, h, w), m.sr.weight, m.sr.bias, stride=sr)
        kv_hw = kv_map.shape[-2:]
        src = F.layer_norm(kv_map.flatten(2).transpose(1, 2), (c,), m.norm.weight, m.norm.bias)
    k, v = (src @ m.kv.weight.T + m.kv.bias).view(b, -1, 2, heads, d).unbind(2)
    agents = torch.einsum('ai,bijc,xj->baxc', pool_matrix(h, ay), q.view(b, h, w, c),
                          pool_matrix(w, ax)).reshape(b, ay * ax, heads, d)

    def agent_bias(grid_bias, size):  # (heads, p*p, gh, gw) -> (heads, ay*ax, size tokens)
        t = resize2d(grid_bias, size).reshape(heads, p, p, -1)
        return torch.einsum('yi,hijn,xj->hyxn', resize_matrix(p, ay), t,
                            resize_matrix(p, ax)).reshape(heads, ay * ax, -1)

    bias1 = agent_bias(m.an_bias, kv_hw) + agent_bias((m.ah_bias + m.aw_bias)[0], kv_hw)
    hawa = (m.ha_bias + m.wa_bias)[0].permute(0, 3, 1, 2)
    bias2 = agent_bias(m.na_bias, hw) + agent_bias(hawa, hw)
    attn1 = (torch.einsum('bahd,bkhd->bhak', agents * scale, k) + bias1).softmax(-1)
    agent_v = torch.einsum('bhak,bkhd->bahd', attn1, v)
    attn2 = (torch.einsum('bqhd,bahd->bhqa', q.view(b, n, heads, d) * scale, agents)
             + bias2.transpose(1, 2)).softmax(-1)
    out = torch.einsum('bhqa,bahd->bqhd', attn2, agent_v).reshape(b, n, c)
    v_map = v.reshape(b, *kv_hw, c).permute(0, 3, 1, 2)
    if sr > 1:
        v_map = resize2d(v_map, hw)
    conv = F.conv2d(v_map, m.dwc.weight, m.dwc.bias, padding=m.dwc.padding, groups=c)
    return (out + conv.flatten(2).transpose(1, 2)) @ m.proj.weight.T + m.proj.bias


def test_agent_equals_official_module():
    rec = load_fixture(AGENT_CASE)
    m = AgentAttention.from_official(rec['checkpoint'], **official_arch(rec)).eval()
    assert set(m.state_dict()) == set(rec['checkpoint'])  # official keys 1:1
    hw = (rec['forward_kwargs']['H'], rec['forward_kwargs']['W'])
    with torch.no_grad():
        out = m(rec['input'], hw)
    assert_matches(out, rec['outputs'][0], 'output')
    # the literal reference reproduces the official output as well
    with torch.no_grad():
        assert_matches(agent_reference(m, rec['input'], hw), rec['outputs'][0], 'reference')


@pytest.mark.parametrize('hw, kwargs', [
    ((12, 15), dict(agent_num=16, agent_shape=(6, 6), window=14)),
    ((7, 9), dict(agent_num=9, agent_shape=(2, 5), window=8, kernel_size=5)),
    ((7, 9), dict(agent_num=4, window=6, sr_ratio=2)),
    ((2, 3), dict(agent_num=16, agent_shape=(4, 4), window=7)),
], ids=['official', 'odd-agents', 'sr2-odd', 'more-agents-than-tokens'])
def test_agent_gradients_and_any_size(hw, kwargs):
    torch.manual_seed(0)
    m = AgentAttention(12, 3, **kwargs)
    with torch.no_grad():  # biases of O(1), so a resizing mistake shows
        for name, p in m.named_parameters():
            if name.endswith('_bias'):
                p.normal_()
    assert_same_grads(m, torch.randn(2, math.prod(hw), 12), agent_reference, hw)


def test_agent_stage_defaults_follow_agent_pvt():
    shapes = [(AgentAttention.stage_defaults(i)['agent_num'],
               AgentAttention.stage_defaults(i)['agent_shape']) for i in range(4)]
    assert shapes == [(9, (12, 12)), (16, (16, 16)), (49, (28, 28)), (49, (28, 28))]
    m = build_mixer(dict(type='AgentAttention'), 64, 1, stage=0)
    assert m.ah_bias.shape == (1, 1, 9, 56, 1) and m.agent_shape == (12, 12)


@pytest.mark.parametrize('kwargs, message', [
    (dict(embed_dims=10), 'not divisible by num_heads'),
    (dict(agent_num=10), 'agent_num must be a positive square'),
    (dict(agent_shape=(3, 0)), 'agent_shape must be two positive ints'),
    (dict(sr_ratio=16, window=14), 'sr_ratio'),
    (dict(kernel_size=4), 'kernel_size must be odd'),
])
def test_agent_bad_arguments(kwargs, message):
    args = {**dict(embed_dims=12, num_heads=3), **kwargs}
    with pytest.raises(ValueError, match=message):
        AgentAttention(**args)


def test_agent_map_smaller_than_reduction():
    m = AgentAttention(12, 3, sr_ratio=4)
    with pytest.raises(ValueError, match='smaller than its 4x4 spatial reduction'):
        m(torch.randn(1, 6, 12), (2, 3))

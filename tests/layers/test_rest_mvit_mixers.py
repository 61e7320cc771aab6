"""ResT's E-MSA (EfficientMultiHeadAttention) and MViTv2's pooling attention
(MultiScalePoolingAttention): the official fixtures after loading the official
weights, gradients against literal references written here, sizes the
official modules refuse, stage defaults and argument errors."""
import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import (EfficientMultiHeadAttention, MultiScalePoolingAttention,
                             build_mixer)

from ..golden import GOLDEN, assert_outputs_match, load_fixture, official_arch

MICRO = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 1, 1, 1])


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def linear(x, p, name):
    return x @ p[f'{name}.weight'].T + p[f'{name}.bias']


# --------------------------------------------------------------------------- references


def emsa_reference(x, hw, p, heads, sr, transform):
    """ResT E-MSA written out: depthwise-reduced keys / values, optional head
    mixing before and instance normalisation after the softmax."""
    b, n, c = x.shape
    d, (h, w) = c // heads, hw
    q = linear(x, p, 'q').reshape(b, n, heads, d)
    src = x
    if sr > 1:
        m = x.transpose(1, 2).reshape(b, c, h, w)
        side = sr + 1 - 2 * (sr // 2)             # smallest side the conv accepts
        m = F.pad(m, (0, max(0, side - w), 0, max(0, side - h)))
        m = F.conv2d(m, p['sr.weight'], p['sr.bias'], stride=sr, padding=sr // 2, groups=c)
        src = layer_norm(m.flatten(2).transpose(1, 2), p['sr_norm.weight'],
                         p['sr_norm.bias'], 1e-5)
    k, v = linear(src, p, 'kv').reshape(b, -1, 2, heads, d).unbind(2)
    logits = torch.einsum('bnhd,bmhd->bhnm', q, k) * d ** -0.5
    if transform:
        mix = p['transform_conv.weight'][:, :, 0, 0]
        logits = (torch.einsum('gh,bhnm->bgnm', mix, logits)
                  + p['transform_conv.bias'][:, None, None])
        a = logits.softmax(-1)
        mean = a.mean((-2, -1), keepdim=True)
        var = ((a - mean) ** 2).mean((-2, -1), keepdim=True)
        a = (a - mean) / torch.sqrt(var + 1e-5)
    else:
        a = logits.softmax(-1)
    out = torch.einsum('bhnm,bmhd->bnhd', a, v).reshape(b, n, c)
    return linear(out, p, 'proj')


def offsets_table(table, q_size, k_size):
    """Relative-position rows for every (query, key) pair along one axis:
    the table linearly resized (half-pixel centres) to ``2 max - 1`` rows when
    needed, offsets scaled by the grid ratio and truncated."""
    length, rows = 2 * max(q_size, k_size) - 1, table.shape[0]
    if rows != length:
        resized = []
        for i in range(length):
            src = max((i + 0.5) * rows / length - 0.5, 0.)
            lo = int(src)
            hi, frac = min(lo + 1, rows - 1), src - lo
            resized.append((1 - frac) * table[lo] + frac * table[hi])
        table = torch.stack(resized)
    q_ratio, k_ratio = max(k_size / q_size, 1.), max(q_size / k_size, 1.)
    index = [[int(i * q_ratio - j * k_ratio + (k_size - 1) * k_ratio) for j in range(k_size)]
             for i in range(q_size)]
    return table[torch.tensor(index)]


def pooling_attention_reference(x, hw, p, heads, kernel_q, stride_q, kernel_kv, stride_kv,
                                cls, eps=1e-6):
    """MViTv2 pooling attention written out (conv pooling per head, class
    token outside pooling and positions, decomposed positions, residual
    pooling on the spatial tokens)."""
    b, n, c = x.shape
    d = c // heads
    qkv = linear(x, p, 'qkv').reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)

    def pool(t, name, kernel, stride):
        if kernel == 1 and stride == 1:
            return t, hw
        head, spatial = t[:, :, :int(cls)], t[:, :, int(cls):]
        m = spatial.reshape(b * heads, *hw, d).permute(0, 3, 1, 2)
        m = F.conv2d(m, p[f'pool_{name}.weight'], stride=stride, padding=kernel // 2, groups=d)
        out_hw = tuple(m.shape[-2:])
        spatial = m.flatten(2).transpose(1, 2).reshape(b, heads, -1, d)
        t = torch.cat([head, spatial], dim=2)
        return layer_norm(t, p[f'norm_{name}.weight'], p[f'norm_{name}.bias'], eps), out_hw

    q, q_hw = pool(qkv[0], 'q', kernel_q, stride_q)
    k, k_hw = pool(qkv[1], 'k', kernel_kv, stride_kv)
    v, _ = pool(qkv[2], 'v', kernel_kv, stride_kv)
    logits = torch.einsum('bhnd,bhmd->bhnm', q * d ** -0.5, k)
    r_h = offsets_table(p['rel_pos_h'], q_hw[0], k_hw[0])      # (qh, kh, d)
    r_w = offsets_table(p['rel_pos_w'], q_hw[1], k_hw[1])      # (qw, kw, d)
    s = int(cls)
    sq = q[:, :, s:].reshape(b, heads, *q_hw, d)
    bias = (torch.einsum('bhijd,iud->bhiju', sq, r_h)[..., None]
            + torch.einsum('bhijd,jvd->bhijv', sq, r_w)[..., None, :])
    spatial = logits[:, :, s:, s:] + bias.reshape(b, heads, sq.shape[2] * sq.shape[3], -1)
    logits = torch.cat([logits[:, :, :s], torch.cat([logits[:, :, s:, :s], spatial], -1)], 2)
    out = logits.softmax(-1) @ v
    out = torch.cat([out[:, :, :s], out[:, :, s:] + q[:, :, s:]], dim=2)
    return linear(out.transpose(1, 2).reshape(b, -1, c), p, 'proj'), q_hw


# --------------------------------------------------------------------------- helpers


def perturbed(module, seed=0):
    """The module in float64 with every parameter randomised (zero-initialised
    tables and biases would hide errors)."""
    gen = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=param.dtype) * 0.5)
    return module.eval()


def assert_forward_and_grads_match(module, reference, x, hw):
    """Same output and the same gradients w.r.t. the input and every parameter."""
    names, params = zip(*module.named_parameters())
    x = x.clone().requires_grad_()
    out = module(x, hw)
    ref = reference(x, dict(zip(names, params)))
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)
    weight = torch.randn_like(out)
    grads = torch.autograd.grad((out * weight).sum(), (x, ) + params)
    ref_grads = torch.autograd.grad((ref * weight).sum(), (x, ) + params)
    for name, g, r in zip(('input', ) + names, grads, ref_grads):
        assert g is not None and torch.isfinite(g).all(), name
        torch.testing.assert_close(g, r, rtol=1e-8, atol=1e-9, msg=f'gradient of {name}')


# --------------------------------------------------------------------------- ResT E-MSA

REST = GOLDEN / 'mixers' / 'rest_emsa.pt'


def test_rest_emsa_equals_the_official_fixture():
    rec = load_fixture(REST)
    module = EfficientMultiHeadAttention.from_official(rec['checkpoint'], **official_arch(rec))
    assert module.apply_transform and module.sr_ratio == 4
    hw = rec['forward_kwargs']['H'], rec['forward_kwargs']['W']
    with torch.no_grad():
        out = module.eval()(rec['input'], hw)
    assert_outputs_match([out], rec['outputs'])
    # the same weights through a mixer config (our defaults: qkv_bias=True)
    cfg = dict(type='EfficientMultiHeadAttention', sr_ratio=4, apply_transform=True)
    mixer = build_mixer(cfg, embed_dims=32, num_heads=2).eval()
    mixer.load_state_dict(EfficientMultiHeadAttention.convert_official_state_dict(
        rec['checkpoint']))
    with torch.no_grad():
        assert_outputs_match([mixer(rec['input'], hw)], rec['outputs'])


@pytest.mark.parametrize('heads, sr, transform, hw', [
    (2, 4, True, (16, 20)),     # the fixture's setting
    (3, 3, True, (15, 21)),     # odd ratio, odd sizes
    (2, 3, True, (1, 7)),       # a 1-pixel side with an odd ratio: the official conv fails
    (2, 2, False, (9, 7)),      # no transform: the SDPA path
    (4, 1, True, (5, 6)),       # no reduction
], ids=['fixture-setting', 'odd', 'one-row', 'sdpa', 'sr1'])
def test_rest_emsa_matches_the_literal_reference(heads, sr, transform, hw):
    torch.manual_seed(0)
    module = perturbed(EfficientMultiHeadAttention(24, heads, sr, transform))
    assert module.apply_transform == transform
    x = torch.randn(2, hw[0] * hw[1], 24, dtype=torch.float64)
    assert_forward_and_grads_match(
        module, lambda t, p: emsa_reference(t, hw, p, heads, sr, transform), x, hw)


def test_rest_emsa_one_head_has_no_transform():
    module = EfficientMultiHeadAttention(16, 1, sr_ratio=8, apply_transform=True)
    assert not module.apply_transform
    assert not any(k.startswith('transform') for k in module.state_dict())
    module = perturbed(module)
    x = torch.randn(1, 70, 16, dtype=torch.float64)
    assert_forward_and_grads_match(
        module, lambda t, p: emsa_reference(t, (7, 10), p, 1, 8, False), x, (7, 10))


def test_rest_emsa_stage_defaults_in_a_pyramid():
    model = TokenPyramid(MICRO, mixer=dict(type='EfficientMultiHeadAttention'))
    mixers = [stage.blocks[0].attn for stage in model.stages]
    assert [m.sr_ratio for m in mixers] == [8, 4, 2, 1]
    # ResT applies the transform wherever a stage has more than one head
    assert [m.apply_transform for m in mixers] == [False, True, True, True]
    outs = model(torch.randn(1, 3, 50, 74))
    assert [o.shape[-2:] for o in outs] == [(13, 19), (7, 10), (4, 5), (2, 3)]


def test_rest_emsa_bad_arguments():
    with pytest.raises(ValueError, match='embed_dims 30 is not divisible by num_heads 4'):
        EfficientMultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match='sr_ratio must be >= 1, got 0'):
        EfficientMultiHeadAttention(32, 2, sr_ratio=0)
    with pytest.raises(TypeError, match=r"unknown official arguments \['window'\]"):
        EfficientMultiHeadAttention.from_official({}, dim=32, window=7)
    rec = load_fixture(REST)
    with pytest.raises(RuntimeError, match='transform_conv'):   # strict loading
        EfficientMultiHeadAttention.from_official(
            rec['checkpoint'], **dict(official_arch(rec), apply_transform=False))


# --------------------------------------------------------------------------- MViTv2

MVIT = GOLDEN / 'mixers' / 'mvit_pooling_attention.pt'


def test_mvit_pooling_attention_equals_the_official_fixture():
    rec = load_fixture(MVIT)
    arch = official_arch(rec)
    assert arch['has_cls_embed'] and arch['stride_q'] == [2, 2]
    module = MultiScalePoolingAttention.from_official(rec['checkpoint'], **arch).eval()
    hw = tuple(rec['forward_kwargs']['hw_shape'])
    with torch.no_grad():
        out, q_hw = module.attend(rec['input'], hw)
    assert_outputs_match([out], rec['outputs'])
    assert list(q_hw) == rec['extra_outputs']['q_shape']
    # the literal reference reproduces the fixture too
    with torch.no_grad():
        ref, ref_hw = pooling_attention_reference(
            rec['input'], hw, rec['checkpoint'], 2, 3, 2, 3, 4, cls=True)
    assert_outputs_match([ref], rec['outputs'])
    assert ref_hw == q_hw


def test_mvit_stage_transition_is_the_fixture_module_on_padded_inputs():
    """A stage-transition attention (official ``dim_out != dim``, no fixture
    upstream holds one) loaded from the fixture's ``dim_out`` weights with
    the ``qkv`` input columns cut to ``dim``: equal to the fixture-checked
    ``dim_out == dim`` module on the input zero-padded to ``dim_out``."""
    rec = load_fixture(MVIT)
    arch = official_arch(rec)
    dim = arch['dim'] // 2
    cut = {k: v[:, :dim] if k == 'qkv.weight' else v for k, v in rec['checkpoint'].items()}
    transition = MultiScalePoolingAttention.from_official(cut, **dict(arch, dim=dim)).eval()
    assert transition.qkv.in_features == dim and transition.proj.out_features == arch['dim_out']
    full = MultiScalePoolingAttention.from_official(rec['checkpoint'], **arch).eval()
    hw = tuple(rec['forward_kwargs']['hw_shape'])
    x = rec['input'][..., :dim]
    with torch.no_grad():
        out, q_hw = transition.attend(x, hw)
        want, want_hw = full.attend(F.pad(x, (0, arch['dim'] - dim)), hw)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    assert q_hw == want_hw


@pytest.mark.parametrize('cfg, hw', [
    (dict(stride_kv=2, input_size=8), (8, 8)),          # token-preserving, tables as sized
    (dict(stride_kv=2, input_size=8), (11, 13)),        # larger, non-square: tables resized
    (dict(stride_kv=4, input_size=16), (5, 3)),         # smaller than the tables
    (dict(stride_kv=1, input_size=4), (3, 5)),          # kv pooled with stride 1
    (dict(kernel_q=3, stride_q=2, stride_kv=4, input_size=16, has_cls_token=True), (9, 7)),
], ids=['as-sized', 'larger-odd', 'smaller', 'kv-stride1', 'cls-q-pooled'])
def test_mvit_pooling_attention_matches_the_literal_reference(cfg, hw):
    torch.manual_seed(0)
    module = perturbed(MultiScalePoolingAttention(24, 3, kernel_kv=3, **cfg))
    cls = cfg.get('has_cls_token', False)
    kq, sq = cfg.get('kernel_q', 1), cfg.get('stride_q', 1)
    x = torch.randn(2, hw[0] * hw[1] + cls, 24, dtype=torch.float64)
    assert_forward_and_grads_match(
        module, lambda t, p: pooling_attention_reference(
            t, hw, p, 3, kq, sq, 3, cfg['stride_kv'], cls)[0], x, hw)
    if sq == 1:
        assert module(x, hw).shape == x.shape


def test_mvit_pooling_attention_stage_defaults_in_a_pyramid():
    model = TokenPyramid(MICRO, mixer=dict(type='MultiScalePoolingAttention'))
    mixers = [stage.blocks[0].attn for stage in model.stages]
    assert [m.stride_kv for m in mixers] == [(4, 4), (2, 2), (1, 1), (1, 1)]
    assert [m.stride_q for m in mixers] == [(1, 1)] * 4
    assert [m.rel_pos_h.shape[0] for m in mixers] == [111, 55, 27, 13]
    assert all(not hasattr(m, 'pool_q') and hasattr(m, 'pool_k') for m in mixers)
    outs = model(torch.randn(1, 3, 50, 74))
    assert [o.shape[-2:] for o in outs] == [(13, 19), (7, 10), (4, 5), (2, 3)]


def test_mvit_pooling_attention_bad_arguments():
    with pytest.raises(ValueError, match='embed_dims 30 is not divisible by num_heads 4'):
        MultiScalePoolingAttention(30, 4)
    with pytest.raises(ValueError, match=r'stride_kv must be a positive int .* got 0'):
        MultiScalePoolingAttention(32, 2, stride_kv=0)
    with pytest.raises(ValueError, match='input_size must be a positive int'):
        MultiScalePoolingAttention(32, 2, input_size=(16, 20))
    module = MultiScalePoolingAttention(32, 2, has_cls_token=True)
    with pytest.raises(ValueError, match=r'64 tokens for a 8x8 map, expected 65 \(class token'):
        module(torch.randn(1, 64, 32), (8, 8))
    with pytest.raises(ValueError, match="supports mode='conv', pool_first=False"):
        MultiScalePoolingAttention.from_official({}, dim=32, mode='max')
    with pytest.raises(ValueError, match='out_dims must be a positive int'):
        MultiScalePoolingAttention(32, 2, out_dims=0)
    with pytest.raises(ValueError, match='input_size must be square'):
        MultiScalePoolingAttention.from_official({}, dim=32, input_size=[16, 20])

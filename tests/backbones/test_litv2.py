"""LITv2-specific behaviour (HiLo, output norms; deformable token merging in
tests/layers/test_deformable_merging.py); the contract every backbone
follows is in test_backbones.py."""
import math

import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import CheckpointMismatchError, LITv2
from vattn_mm.layers import BiasedDeformConv2d, HiLoAttention

from ..backbone_cases import CASES
from ..golden import case_paths, check_released_keys, load_fixture, official_arch, read_key_list
from ..golden import write_released

MICRO = CASES['LITv2'].micro
LITV2_CONVERTER = LITv2.converter


def build_from_case(rec, ckpt, **kwargs):
    return LITv2(arch=official_arch(rec, drop=('out_indices', )), drop_path_rate=0.,
                 out_indices=rec['arch']['out_indices'],
                 init_cfg=dict(type='Pretrained', checkpoint=ckpt), **kwargs)


def case(name):
    return load_fixture(next(p for p in case_paths('litv2') if p.stem == name))


def test_golden_cases_present():
    assert {p.stem for p in case_paths('litv2')} >= {
        'micro_a05', 'micro_a05_odd100x150', 'micro_a09'}


def test_golden_head_split():
    # fixture notes: 'dim 48: 3 Lo-Fi + 1 Hi-Fi heads of 12 ch, ws 2',
    # 'dim 96: 6 Lo-Fi + 0 Hi-Fi heads of 16 ch, ws 1'
    model = LITv2(official_arch(case('micro_a09'), drop=('out_indices', )))
    attn2, attn3 = model.stages[2].blocks[0].attn, model.stages[3].blocks[0].attn
    assert (attn2.l_heads, attn2.h_heads, attn2.l_dim, attn2.h_dim) == (3, 1, 36, 12)
    assert (attn3.l_heads, attn3.h_heads, attn3.l_dim) == (6, 0, 96)
    assert not hasattr(attn3, 'h_qkv')
    # early stages are attention-free; output 0 is not normalised (mmdet backbone)
    assert not any(b.has_mixer for s in model.stages[:2] for b in s.blocks)
    assert isinstance(model.stages[0].norm, torch.nn.Identity)


def test_segmentation_style_first_output_norm(tmp_path):
    """The official mmseg backbone also has a fresh LayerNorm on output 0."""
    rec = case('micro_a05')
    model = build_from_case(rec, write_released(rec, tmp_path), norm_first_output=True)
    model.init_weights()
    model.eval()
    with torch.no_grad():
        outs = model(rec['input'])
    ref0 = F.layer_norm(rec['outputs'][0].permute(0, 2, 3, 1), (16, )).permute(0, 3, 1, 2)
    torch.testing.assert_close(outs[0], ref0, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[3], rec['outputs'][3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('arch', sorted(LITv2.arch_zoo))
def test_released_parameter_counts(arch):
    with torch.device('meta'):
        model = LITv2(arch)
    check_released_keys(f'litv2_{arch}', model, LITV2_CONVERTER)
    header, sd = read_key_list(f'litv2_{arch}')
    dense_only = sum(p.numel() for k, p in model.named_parameters()
                     if LITV2_CONVERTER._matches(LITV2_CONVERTER.dense_only, k))
    final_norm = sd['norm.weight'].numel() * 2
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params - dense_only == \
        int(header['total_params']) - int(header['head_params']) - final_norm


@pytest.mark.parametrize('wrapper', [None, 'model', 'state_dict'])
def test_wrappers_and_module_prefix(wrapper, tmp_path):
    rec = case('micro_a05')
    sd = {'module.' + k: v for k, v in rec['checkpoint'].items()}
    path = tmp_path / 'ck.pth'
    torch.save(sd if wrapper is None else {wrapper: sd}, path)
    model = build_from_case(rec, str(path))
    model.init_weights()
    ours = model.state_dict()
    converted = LITV2_CONVERTER.official_to_ours(rec['checkpoint'])
    assert set(ours) - set(converted) == {f'stages.{i}.norm.{p}' for i in (1, 2, 3)
                                          for p in ('weight', 'bias')}
    for k, v in converted.items():
        assert torch.equal(ours[k], v), k
    # DTM at the end of official stage 0 is our stage 1's patch embedding
    assert torch.equal(ours['stages.1.patch_embed.norm.running_var'],
                       rec['checkpoint']['layers.0.downsample.norm_layer.running_var'])


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = case('micro_a05')
    path = write_released(rec, tmp_path)
    arch = dict(official_arch(rec, drop=('out_indices', )), alpha=0.9)  # other head split
    model = LITv2(arch, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match=r'mis-shaped keys.*attn\.l_q\.weight'):
        model.init_weights()
    arch = dict(official_arch(rec, drop=('out_indices', )), has_msa=[0, 1, 1, 1],
                local_ws=[0, 2, 2, 1])
    model = LITv2(arch, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match=r'missing keys.*stages\.1\.blocks\.0\.attn'):
        model.init_weights()
    model = LITv2(MICRO, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='mis-shaped keys'):
        model.init_weights()


def test_official_key_names():
    official = LITV2_CONVERTER.ours_to_official(LITv2(MICRO).state_dict())
    assert 'layers.2.downsample.dconv.conv_offset.weight' in official
    assert 'layers.0.downsample.norm_layer.weight' in official


def test_bad_arch_and_args():
    with pytest.raises(ValueError, match=r"unknown keys \['qk_scale'\]"):
        LITv2(dict(MICRO, qk_scale=0.1))
    with pytest.raises(ValueError, match=r"arch\['local_ws'\] has 3 entries"):
        LITv2(dict(MICRO, local_ws=[0, 2, 1]))
    with pytest.raises(ValueError, match='stage 1 has attention .* local_ws 0'):
        LITv2(dict(MICRO, has_msa=[0, 1, 1, 1]))
    with pytest.raises(ValueError, match='stage 2 has 32 channels, not divisible by num_heads 3'):
        LITv2(dict(MICRO, num_heads=[1, 2, 3, 8]))
    # official keys without effect in the official dense code are accepted
    LITv2(dict(MICRO, window_size=7, drop_path_rate=0.3, norm_layer='nn.LayerNorm'))


@pytest.mark.parametrize('size', [(64, 64), (100, 150), (29, 47), (61, 35)])
def test_any_input_size(size):
    model = LITv2(MICRO).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    h, w = math.ceil(size[0] / 4), math.ceil(size[1] / 4)   # stem pads to /4
    for o in outs:
        assert o.shape[2:] == (h, w)
        h, w = h // 2, w // 2                                 # DTM floors


def test_too_small_input_is_a_clear_error():
    model = LITv2(MICRO).eval()
    with pytest.raises(ValueError, match='input 28x64 is too small; each side needs at least 29'):
        model(torch.randn(1, 3, 28, 64))


def test_frozen_stages_and_norm_eval():
    model = LITv2(MICRO, frozen_stages=2, norm_eval=True)
    model.train()
    assert not any(p.requires_grad for p in model.stages[:2].parameters())
    assert all(p.requires_grad for p in model.stages[2:].parameters())
    assert not model.stages[1].patch_embed.training
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 3 and not any(m.training for m in bns)
    outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [8, 16, 32, 64]


def test_init_without_checkpoint_starts_with_zero_offsets():
    model = LITv2(MICRO)
    model.init_weights()
    dconvs = [m for m in model.modules() if isinstance(m, BiasedDeformConv2d)]
    assert len(dconvs) == 3
    for m in dconvs:
        assert not m.conv_offset.weight.any() and not m.conv_offset.bias.any()
        assert m.weight.std() > 0


# ---------------------------------------------------------------- HiLo
def hilo_reference(m: HiLoAttention, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Literal HiLo: explicit zero padding, a loop over Hi-Fi windows,
    explicit softmax attention, mean-pooled Lo-Fi keys / values."""
    b, n, c = x.shape
    ws = m.ws
    hp, wp = math.ceil(h / ws) * ws, math.ceil(w / ws) * ws
    xp = x.new_zeros(b, hp, wp, c)
    xp[:, :h, :w] = x.view(b, h, w, c)
    outs = []
    if m.h_heads:
        hd = m.h_dim // m.h_heads
        qkv = m.h_qkv(xp)
        out = x.new_zeros(b, hp, wp, m.h_dim)
        for i in range(0, hp, ws):
            for j in range(0, wp, ws):
                win = qkv[:, i:i + ws, j:j + ws].reshape(b, ws * ws, 3, m.h_heads, hd)
                q, k, v = win.unbind(2)
                att = (torch.einsum('bthd,bshd->bhts', q, k) * hd ** -0.5).softmax(-1)
                o = torch.einsum('bhts,bshd->bthd', att, v)
                out[:, i:i + ws, j:j + ws] = o.reshape(b, ws, ws, m.h_dim)
        outs.append(m.h_proj(out)[:, :h, :w].reshape(b, n, m.h_dim))
    if m.l_heads:
        hd = m.l_dim // m.l_heads
        q = m.l_q(x).view(b, n, m.l_heads, hd)
        pooled = xp.view(b, hp // ws, ws, wp // ws, ws, c).mean((2, 4)).reshape(b, -1, c)
        k, v = m.l_kv(pooled).view(b, -1, 2, m.l_heads, hd).unbind(2)
        att = (torch.einsum('bnhd,bmhd->bhnm', q, k) * hd ** -0.5).softmax(-1)
        o = torch.einsum('bhnm,bmhd->bnhd', att, v).reshape(b, n, m.l_dim)
        outs.append(m.l_proj(o))
    return torch.cat(outs, dim=-1)


@pytest.mark.parametrize('ws,alpha,hw', [
    (2, 0.5, (5, 7)),     # odd sizes: zero-padded, NOT masked, cropped
    (3, 0.5, (7, 8)),
    (2, 0.5, (4, 6)),     # no padding
    (2, 0.0, (5, 5)),     # Hi-Fi only
    (2, 1.0, (5, 6)),     # Lo-Fi only, pooled
    (1, 0.5, (5, 7)),     # ws 1: plain MHSA, all heads Lo-Fi
])
def test_hilo_matches_literal_reference(ws, alpha, hw):
    m = HiLoAttention(32, 4, window_size=ws, alpha=alpha).eval()
    h, w = hw
    assert (m.h_heads, m.l_heads) == ((0, 4) if ws == 1 else (4 - int(4 * alpha), int(4 * alpha)))
    x = torch.randn(2, h * w, 32)
    out = m(x, hw)
    assert out.shape == x.shape
    torch.testing.assert_close(out, hilo_reference(m, x, h, w), rtol=1e-5, atol=1e-5)


def test_hilo_bad_args():
    with pytest.raises(ValueError, match='not divisible by num_heads'):
        HiLoAttention(30, 4)
    with pytest.raises(ValueError, match='alpha'):
        HiLoAttention(32, 4, alpha=1.5)
    with pytest.raises(ValueError, match='window_size'):
        HiLoAttention(32, 4, window_size=0)

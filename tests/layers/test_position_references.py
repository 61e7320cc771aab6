"""The position modules and tokenisers of the field against independent
references written here from the papers (and the official modules' key
names and constants): MAE's and MoCo v3's sin-cos tables, Swin v2's
continuous position bias, CSWin's LePE, ResT's pixel attention, CeiT's
image-to-tokens and ViT_c's convolutional stem."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vattn_mm.layers import (CeiTImageToTokens, ConvStem, GlobalSelfAttention, PixelAttention,
                             ShiftedWindowAttention, SinCosPosEmbed)


# ------------------------------------------------------------ sin-cos
def one_axis(dims: int, pos: np.ndarray) -> np.ndarray:
    """(M, dims): [sin(p w), cos(p w)], w_i = 1 / 10000 ** (i / (dims / 2))."""
    omega = 1. / 10000 ** (np.arange(dims // 2, dtype=np.float64) / (dims / 2.))
    out = np.einsum('m,d->md', pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def mae_table(dims: int, h: int, w: int) -> np.ndarray:
    """MAE: ``np.meshgrid(grid_w, grid_h)``, first half from ``grid[0]`` (the column)."""
    grid = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return np.concatenate([one_axis(dims // 2, grid[0]), one_axis(dims // 2, grid[1])], axis=1)


def mocov3_table(dims: int, side: int) -> torch.Tensor:
    """MoCo v3 (square grids): ``torch.meshgrid(grid_w, grid_h)`` ('ij'), then
    [sin(w), cos(w), sin(h), cos(h)]."""
    grid_w, grid_h = torch.meshgrid(torch.arange(side, dtype=torch.float32),
                                    torch.arange(side, dtype=torch.float32), indexing='ij')
    omega = 1. / 10000 ** (torch.arange(dims // 4, dtype=torch.float32) / (dims // 4))
    out_w = torch.einsum('m,d->md', grid_w.flatten(), omega)
    out_h = torch.einsum('m,d->md', grid_h.flatten(), omega)
    return torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)


@pytest.mark.parametrize('hw', [(7, 7), (5, 9)])
def test_sincos_is_mae_table(hw):
    pe = SinCosPosEmbed(32)
    table = pe(torch.zeros(1, hw[0] * hw[1], 32), hw)[0]
    ref = torch.from_numpy(mae_table(32, *hw)).float()
    torch.testing.assert_close(table, ref, rtol=0, atol=1e-6)
    assert not list(pe.parameters()) and not pe.state_dict()


def test_sincos_yx_is_mocov3_table():
    table = SinCosPosEmbed(24, axis_order='yx')(torch.zeros(1, 36, 24), (6, 6))[0]
    torch.testing.assert_close(table, mocov3_table(24, 6), rtol=0, atol=1e-6)
    assert not torch.allclose(table, SinCosPosEmbed(24)(torch.zeros(1, 36, 24), (6, 6))[0])


def test_sincos_bad_settings():
    with pytest.raises(ValueError, match='multiple of 4'):
        SinCosPosEmbed(18)
    with pytest.raises(ValueError, match="axis_order='hw'"):
        SinCosPosEmbed(16, axis_order='hw')


# ------------------------------------------------------------ Swin v2 CPB
def cpb_reference(mlp: dict, window: int, pretrained: int, heads: int) -> torch.Tensor:
    """(heads, M*M, M*M) Swin v2 bias built with loops: offsets (dy, dx) of
    query minus key, / (P - 1), * 8, sign * log2(|t| + 1) / 3, the MLP, then
    16 * sigmoid."""
    span = (pretrained or window) - 1
    tokens = [(i, j) for i in range(window) for j in range(window)]
    bias = torch.empty(heads, len(tokens), len(tokens))
    for a, (qi, qj) in enumerate(tokens):
        for b, (ki, kj) in enumerate(tokens):
            t = torch.tensor([qi - ki, qj - kj], dtype=torch.float32) / span * 8
            t = torch.sign(t) * torch.log2(t.abs() + 1) / 3
            hidden = torch.relu(t @ mlp['cpb_mlp.0.weight'].T + mlp['cpb_mlp.0.bias'])
            bias[:, a, b] = 16 * torch.sigmoid(hidden @ mlp['cpb_mlp.2.weight'].T)
    return bias


def window_attention_reference(x, hw, window, heads, sd, bias):
    """W-MSA (no shift) on a map whose sides are multiples of the window."""
    b, n, c = x.shape
    h, w = hw
    d = c // heads
    win = x.view(b, h // window, window, w // window, window, c).permute(0, 1, 3, 2, 4, 5) \
        .reshape(-1, window * window, c)
    qkv = (win @ sd['qkv.weight'].T + sd['qkv.bias']).view(win.shape[0], -1, 3, heads, d)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    attn = torch.softmax(q @ k.transpose(-2, -1) * d ** -0.5 + bias, dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(win.shape[0], -1, c)
    out = out.view(b, h // window, w // window, window, window, c).permute(0, 1, 3, 2, 4, 5) \
        .reshape(b, n, c)
    return out @ sd['proj.weight'].T + sd['proj.bias']


@pytest.mark.parametrize('pretrained', [0, 8])
def test_swin_v2_cpb_equals_the_reference_and_loads_official_keys(pretrained):
    torch.manual_seed(0)
    heads, window = 2, 4
    mixer = ShiftedWindowAttention(16, heads, window, position_bias='cpb',
                                   pretrained_window_size=pretrained, cpb_hidden_dims=32)
    official = {   # a Swin v2 WindowAttention's keys for the bias: cpb_mlp.{0,2} + the coords buffer
        'cpb_mlp.0.weight': torch.randn(32, 2), 'cpb_mlp.0.bias': torch.randn(32),
        'cpb_mlp.2.weight': torch.randn(heads, 32) * 0.5,
        'relative_coords_table': torch.zeros(1, 2 * window - 1, 2 * window - 1, 2),
        'relative_position_index': torch.zeros(window ** 2, window ** 2, dtype=torch.long)}
    rest = {k: torch.randn_like(v) * 0.3 for k, v in mixer.state_dict().items()
            if not k.startswith('cpb_mlp')}
    mixer.load_state_dict({**official, **rest})          # strict: every key by name
    hw = (8, 12)
    x = torch.randn(2, hw[0] * hw[1], 16)
    bias = cpb_reference(official, window, pretrained, heads)
    ref = window_attention_reference(x, hw, window, heads, rest, bias)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, hw), ref, rtol=1e-5, atol=1e-5)
        bias_ours = mixer.bias_table()[mixer.relative_position_index].permute(2, 0, 1)
    torch.testing.assert_close(bias_ours, bias, rtol=1e-6, atol=1e-6)
    assert 0 < bias.min() and bias.max() < 16


def test_swin_cpb_bad_settings():
    with pytest.raises(ValueError, match="position_bias='rope'"):
        ShiftedWindowAttention(16, 2, 4, position_bias='rope')
    with pytest.raises(ValueError, match='window of at least 2'):
        ShiftedWindowAttention(16, 2, 1, position_bias='cpb')
    table = ShiftedWindowAttention(16, 2, 4)
    assert 'relative_position_bias_table' in table.state_dict()
    assert not any(k.startswith('cpb_mlp') for k in table.state_dict())


# ------------------------------------------------------------ CSWin LePE
def test_lepe_equals_cswin_last_stage_attention():
    """CSWin's last stage: one LePEAttention branch over the whole map
    (``attn = softmax(q k^T * d^-0.5)``, ``x = attn @ v + get_v(v map)``
    per head), then the block's ``proj``; keys ``qkv``, ``attns.0.get_v``,
    ``proj``."""
    torch.manual_seed(0)
    c, heads, hw = 24, 3, (5, 7)
    d = c // heads
    official = {'qkv.weight': torch.randn(3 * c, c) * 0.3, 'qkv.bias': torch.randn(3 * c) * 0.1,
                'attns.0.get_v.weight': torch.randn(c, 1, 3, 3) * 0.3,
                'attns.0.get_v.bias': torch.randn(c) * 0.1,
                'proj.weight': torch.randn(c, c) * 0.3, 'proj.bias': torch.randn(c) * 0.1}
    x = torch.randn(2, hw[0] * hw[1], c)
    q, k, v = (x @ official['qkv.weight'].T + official['qkv.bias']).view(2, -1, 3, c) \
        .permute(2, 0, 1, 3)
    v_map = v.transpose(1, 2).reshape(2, c, *hw)
    lepe = F.conv2d(v_map, official['attns.0.get_v.weight'], official['attns.0.get_v.bias'],
                    padding=1, groups=c).reshape(2, heads, d, -1).permute(0, 1, 3, 2)

    def heads_of(t):
        return t.view(2, -1, heads, d).transpose(1, 2)
    attn = torch.softmax(heads_of(q) * d ** -0.5 @ heads_of(k).transpose(-2, -1), dim=-1)
    out = (attn @ heads_of(v) + lepe).transpose(1, 2).reshape(2, -1, c)
    ref = out @ official['proj.weight'].T + official['proj.bias']

    mixer = GlobalSelfAttention(c, heads, lepe=True)
    mixer.load_state_dict(GlobalSelfAttention.convert_official_cswin_state_dict(official))
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, hw), ref, rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match='lepe needs the map size'):
            mixer(x)
    with pytest.raises(KeyError, match="'attns.1.get_v.weight' is not a key"):
        GlobalSelfAttention.convert_official_cswin_state_dict(
            {'attns.1.get_v.weight': official['attns.0.get_v.weight']})
    assert 'lepe.weight' not in GlobalSelfAttention(c, heads).state_dict()


# ------------------------------------------------------------ ResT PA
def test_pixel_attention_is_rest_pa_with_its_keys():
    """ResT's PA ``x * sigmoid(pa_conv(x))`` (depthwise 3x3, padding 1,
    bias) on the embedding's map; the official ``pa_conv`` keys load."""
    torch.manual_seed(0)
    c, hw = 8, (5, 6)
    official = {'pa_conv.weight': torch.randn(c, 1, 3, 3), 'pa_conv.bias': torch.randn(c)}
    pa = PixelAttention(c)
    pa.load_state_dict(official)
    x_map = torch.randn(2, c, *hw)
    ref = x_map * torch.sigmoid(F.conv2d(x_map, official['pa_conv.weight'],
                                         official['pa_conv.bias'], padding=1, groups=c))
    tokens = x_map.flatten(2).transpose(1, 2)
    from vattn_mm.layers import apply_position
    with torch.no_grad():
        out = apply_position(pa, tokens, hw)
    torch.testing.assert_close(out, ref.flatten(2).transpose(1, 2), rtol=1e-6, atol=1e-6)


def test_pixel_attention_gates_right_after_the_embedding():
    """In a pyramid the stage-0 tokens are ``norm(conv(x)) * gate``."""
    from vattn_mm.backbones import TokenPyramid
    model = TokenPyramid(dict(embed_dims=[8, 8, 8, 8], num_heads=[1] * 4, mlp_ratios=[2] * 4,
                              depths=[1] * 4), position=dict(type='PixelAttention'),
                         drop_path_rate=0.).eval()
    stage = model.stages[0]
    seen = []
    stage.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    x = torch.randn(1, 3, 32, 40)
    with torch.no_grad():
        model(x)
        tokens, hw = stage.patch_embed(x)
        want = tokens * stage.position(tokens, hw)
    torch.testing.assert_close(seen[0], want)


# ------------------------------------------------------------ tokenisers
@pytest.mark.parametrize('patch_size', [1, 2])
def test_ceit_image_to_tokens_reference(patch_size):
    torch.manual_seed(0)
    stem = CeiTImageToTokens(3, 16, patch_size=patch_size).eval()
    for p in stem.parameters():
        nn.init.normal_(p, std=0.3)
    stem.bn.running_mean.normal_(std=0.2)
    stem.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 37, 53)
    feat = F.conv2d(x, stem.conv.weight, stride=2, padding=3)
    feat = F.batch_norm(feat, stem.bn.running_mean, stem.bn.running_var, stem.bn.weight,
                        stem.bn.bias, eps=stem.bn.eps)
    feat = F.max_pool2d(feat, 3, 2, 1)
    assert feat.shape[-2:] == (math.ceil(37 / 4), math.ceil(53 / 4))
    feat = F.pad(feat, (0, -feat.shape[-1] % patch_size, 0, -feat.shape[-2] % patch_size))
    proj = F.conv2d(feat, stem.proj.weight, stem.proj.bias, stride=patch_size)
    ref = F.layer_norm(proj.flatten(2).transpose(1, 2), (16, ), stem.norm.weight, stem.norm.bias)
    with torch.no_grad():
        tokens, hw = stem(x)
    assert hw == (math.ceil(37 / 4 / patch_size), math.ceil(53 / 4 / patch_size))
    torch.testing.assert_close(tokens, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match='patch_size must be >= 1'):
        CeiTImageToTokens(3, 16, patch_size=0)


def test_conv_stem_is_vit_c_stem():
    """ViT_c (pycls ``ViTStemConv``): bias-free 3x3 convs (padding 1) + BN +
    ReLU, stride 2 each, then a 1x1 conv with bias; ConvStem with
    ``out_norm_cfg=None`` computes it (four stride-2 layers: stride 16)."""
    torch.manual_seed(0)
    widths = (8, 16, 24, 32)
    stem = ConvStem(3, 40, hidden_dims=widths, strides=(2, 2, 2, 2), out_norm_cfg=None).eval()
    layers, w_in = [], 3
    for w_out in widths:
        layers += [nn.Conv2d(w_in, w_out, 3, 2, 1, bias=False), nn.BatchNorm2d(w_out), nn.ReLU()]
        w_in = w_out
    reference = nn.Sequential(*layers, nn.Conv2d(w_in, 40, 1, bias=True)).eval()
    for p in reference.parameters():
        nn.init.normal_(p, std=0.3)
    for m in reference:
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(std=0.2)
            m.running_var.uniform_(0.5, 1.5)
    assert [v.shape for v in stem.convs.state_dict().values()] == \
        [v.shape for v in reference.state_dict().values()]
    stem.convs.load_state_dict(reference.state_dict())
    x = torch.randn(1, 3, 64, 80)
    with torch.no_grad():
        tokens, hw = stem(x)
        want = reference(x)
    assert stem.stride == 16 and hw == (4, 5)
    torch.testing.assert_close(tokens, want.flatten(2).transpose(1, 2), rtol=1e-5, atol=1e-5)

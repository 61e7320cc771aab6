"""Shared layers' fast paths: each gives the result of the plain computation."""
import pytest
import torch
from torch import nn

from vattn_mm.layers import (MLP, ConvFFN, DepthwiseConv2d, FocalModulation, is_token_map,
                             tokens_to_map)
from vattn_mm.layers.fused import FUSED_ACT_AVAILABLE


@pytest.mark.parametrize('kernel_size,bias,batch', [(3, True, 1), (3, True, 2), (9, False, 1)])
def test_depthwise_conv_on_token_maps_is_channels_last_and_exact(kernel_size, bias, batch):
    """A map viewed from (B, N, C) tokens runs channels-last (no copy to NCHW,
    a channels-last output that turns back into tokens without a copy) and
    equals nn.Conv2d forward and backward; an NCHW map takes the plain path."""
    torch.manual_seed(0)
    c, hw = 16, (9, 11)
    conv = DepthwiseConv2d(c, kernel_size, bias=bias)
    plain = nn.Conv2d(c, c, kernel_size, padding=kernel_size // 2, groups=c, bias=bias)
    plain.load_state_dict(conv.state_dict())
    tokens = torch.randn(batch, hw[0] * hw[1], c)
    x1 = tokens.clone().requires_grad_()
    x2 = tokens.clone().requires_grad_()
    map1, map2 = tokens_to_map(x1, hw), tokens_to_map(x2, hw).contiguous()
    assert is_token_map(map1) and not is_token_map(map2)
    out1, out2 = conv(map1), plain(map2)
    assert out1.is_contiguous(memory_format=torch.channels_last) and out1.stride(1) == 1
    torch.testing.assert_close(out1, out2, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out2)
    out1.backward(grad)
    out2.backward(grad)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(conv.weight.grad, plain.weight.grad, rtol=1e-4, atol=1e-4)
    out3 = conv(map2.detach())                        # NCHW in: plain nn.Conv2d path
    assert out3.is_contiguous()
    torch.testing.assert_close(out3, out2.detach(), rtol=1e-5, atol=1e-5)


def test_depthwise_conv_keys_are_conv2d_keys():
    conv = DepthwiseConv2d(8, 5, stride=2, dilation=2)
    assert set(conv.state_dict()) == {'weight', 'bias'}
    assert conv.weight.shape == (8, 1, 5, 5) and conv.groups == 8
    assert conv.padding == (4, 4) and conv.stride == (2, 2)


def test_mlp_runs_long_sequences_in_chunks_without_autograd():
    """Inference splits the tokens into chunks (far less memory for the wide
    hidden layer) with the same result; with autograd it runs whole."""
    torch.manual_seed(0)
    mlp = MLP(8, 32, chunk_tokens=7).eval()
    x = torch.randn(2, 25, 8)                        # 50 tokens: 7 full chunks + 1 token
    with torch.no_grad():
        whole = mlp._mlp(x)
        calls = []
        handle = mlp.fc1.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
        chunked = mlp(x)
        handle.remove()
    assert calls == [7] * 7 + [1]
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-6)
    assert chunked.shape == x.shape
    calls.clear()
    handle = mlp.fc1.register_forward_hook(lambda m, i, o: calls.append(i[0].shape))
    mlp(x).sum().backward()
    assert calls == [x.shape] and mlp.fc1.weight.grad is not None


def test_depthwise_conv_large_kernels_take_the_plain_path():
    from vattn_mm.layers.conv import CHANNELS_LAST_MAX_DEPTHWISE_KERNEL
    big = DepthwiseConv2d(8, CHANNELS_LAST_MAX_DEPTHWISE_KERNEL + 2)
    small = DepthwiseConv2d(8, CHANNELS_LAST_MAX_DEPTHWISE_KERNEL)
    x = tokens_to_map(torch.randn(1, 20 * 20, 8), (20, 20))
    assert not big.channels_last and small.channels_last
    assert big(x).is_contiguous() and small(x).stride(1) == 1


@pytest.mark.parametrize('cin,cout,kernel,stride', [(8, 16, 3, 2), (12, 12, 4, 4), (6, 10, 1, 1)])
def test_token_map_conv_equals_conv2d(cin, cout, kernel, stride):
    """Strided / patch-embedding convs on token maps: channels-last in and out
    (1x1 convs take the plain path: no faster), the result of nn.Conv2d."""
    from vattn_mm.layers import TokenMapConv2d
    torch.manual_seed(0)
    conv = TokenMapConv2d(cin, cout, kernel, stride, kernel // 2 if kernel == 3 else 0)
    plain = nn.Conv2d(cin, cout, kernel, stride, kernel // 2 if kernel == 3 else 0)
    plain.load_state_dict(conv.state_dict())
    x = tokens_to_map(torch.randn(2, 12 * 16, cin), (12, 16)).requires_grad_()
    out, ref = conv(x), plain(x.detach().contiguous())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert conv.channels_last == (kernel > 1)
    if kernel > 1:
        assert out.is_contiguous(memory_format=torch.channels_last)
    out.sum().backward()
    assert conv.weight.grad is not None and x.grad is not None


def test_token_block_inplace_residuals():
    """In inference the blocks add their residuals into their (own) input:
    same result; refused under autograd, where the input is saved."""
    from vattn_mm.layers import ConvFFN, SpatialReductionAttention, TokenBlock
    torch.manual_seed(0)
    block = TokenBlock(16, SpatialReductionAttention(16, 2, sr_ratio=2), ConvFFN(16, 32),
                       layer_scale=0.5).eval()
    x = torch.randn(2, 6 * 8, 16)
    with torch.no_grad():
        ref = block(x, (6, 8))
        own = x.clone()
        out = block(own, (6, 8), inplace=True)
    assert out.data_ptr() == own.data_ptr()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError, match='inference'):
        block(x.clone(), (6, 8), inplace=True)


@pytest.mark.parametrize('family,arch', [('DilateFormer', dict(
    embed_dim=12, depths=[1, 2, 1, 1], num_heads=[3, 6, 4, 8])), ('P2T', 'tiny')])
def test_backbone_inference_equals_autograd_forward(family, arch):
    """run_blocks' in-place residuals (no autograd) give the outputs of the
    autograd forward, and leave the caller's image untouched."""
    from mmengine.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(dict(type=family, arch=arch, drop_path_rate=0.)).eval()
    img = torch.randn(1, 3, 96, 64)
    keep = img.clone()
    grad_outs = model(img)
    with torch.no_grad():
        outs = model(img)
    for a, b in zip(outs, grad_outs):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-5)
    assert torch.equal(img, keep)


def _fused_cases() -> dict:
    """name -> (layer factory, fused calls per inference forward, the hooked
    modules' names and the fused calls left with each one hooked)."""
    hswish = dict(type='HSwish')
    return dict(
        mlp_gelu=(lambda: MLP(16, 48, chunk_tokens=None), 1, dict(fc1=0, act=0)),
        conv_ffn_gelu=(lambda: ConvFFN(16, 48), 1, dict(dwconv=0, act=0)),
        # with the conv (or its activation) hooked, fc1 + pre_act still fuse
        conv_ffn_hswish=(lambda: ConvFFN(16, 48, act_cfg=hswish, pre_act_cfg=hswish), 2,
                         dict(dwconv=1, act=1)),
        # two focal levels; a hook on one level's conv leaves the other fused
        focal_modulation=(lambda: FocalModulation(16, 2, 3), 2,
                          {'focal_layers.0': 1, 'act': 0}),
    )


@pytest.mark.skipif(not FUSED_ACT_AVAILABLE, reason='this PyTorch build lacks the oneDNN fused ops')
@pytest.mark.parametrize('case', sorted(_fused_cases()))
def test_fused_activation_inference_matches_the_plain_path(case, monkeypatch):
    """Without autograd the FFNs and focal modulation run linear / depthwise
    conv + activation as one oneDNN call, with the plain path's result; with
    autograd, under a FLOP counter or with a hook on the layer or its
    activation they take the plain path, and the hook runs."""
    from torch.utils.flop_counter import FlopCounterMode

    from vattn_mm.layers import fused
    calls = []

    class CountingOps:
        def __getattr__(self, name):
            op = getattr(torch.ops.mkldnn, name)
            return lambda *args: calls.append(name) or op(*args)

    monkeypatch.setattr(fused, '_OPS', CountingOps())
    torch.manual_seed(0)
    make, fused_calls, hooked_calls = _fused_cases()[case]
    layer = make().eval()
    x = torch.randn(2, 12 * 10, 16)
    plain = layer(x, (12, 10))                      # autograd on: plain path
    assert calls == []
    with torch.no_grad():
        fast = layer(x, (12, 10))
        assert len(calls) == fused_calls, calls
        calls.clear()
        with FlopCounterMode(display=False):
            layer(x, (12, 10))
        assert calls == []
        for name, left in hooked_calls.items():
            seen = []
            module = layer.get_submodule(name)
            handle = module.register_forward_hook(lambda *args: seen.append(1))
            layer(x, (12, 10))
            handle.remove()
            assert len(calls) == left, (name, calls)
            assert seen, f'the hook on {name} did not run'
            calls.clear()
    torch.testing.assert_close(fast, plain.detach(), rtol=0, atol=1e-5)

"""Convolutions over token maps (``vattn_mm/ops/conv.py``): channels-last
operands (``token_map_conv``) and the depthwise weight gradient as a
convolution (``depthwise_weight_grad``) give ``nn.Conv2d``'s values and
gradients."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vattn_mm.layers import DepthwiseConv2d, TokenMapConv2d, tokens_to_map
from vattn_mm.ops.conv import (CHANNELS_LAST_MAX_DEPTHWISE_KERNEL,
                               DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL, depthwise_weight_grad,
                               is_token_map, owns_weight_grad, token_map_layout)

from .grads import weighted_grads


@pytest.mark.parametrize('kernel, stride, dilation, batch, bias, tokens', [
    (5, 1, 1, 1, True, True), (7, 2, 1, 2, False, True), (5, 1, 2, 2, True, False),
    (DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL + 8, 1, 1, 2, True, True)])
def test_depthwise_conv_gradients_are_autograds(kernel, stride, dilation, batch, bias, tokens):
    torch.manual_seed(0)
    conv = DepthwiseConv2d(6, kernel, stride, dilation=dilation, bias=bias).double()
    h, w = 13, 10
    if tokens:   # a (B, C, H, W) view of (B, N, C) tokens, as the backbones make
        leaf = torch.randn(batch, h * w, 6, dtype=torch.double, requires_grad=True)
        x = leaf.transpose(1, 2).reshape(batch, 6, h, w)
    else:
        leaf = x = torch.randn(batch, 6, h, w, dtype=torch.double, requires_grad=True)
    out = conv(x)
    assert type(out.grad_fn).__name__ == 'TokenMapConvFunctionBackward'
    ours = weighted_grads(out, [leaf, *conv.parameters()])
    plain = weighted_grads(F.conv2d(x, conv.weight, conv.bias, stride, conv.padding, dilation, 6),
                           [leaf, *conv.parameters()])
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_depthwise_weight_grad_is_atens():
    torch.manual_seed(0)
    conv = DepthwiseConv2d(5, 9, stride=2)
    x, grad = torch.randn(2, 5, 17, 14), torch.randn(2, 5, 9, 7)
    expected = torch.ops.aten.convolution_backward(
        grad, x, conv.weight, None, conv.stride, conv.padding, conv.dilation, False, [0, 0], 5,
        [False, True, False])[1]
    torch.testing.assert_close(depthwise_weight_grad(grad, x, conv), expected,
                               rtol=1e-4, atol=1e-5)


def test_small_or_untrained_depthwise_convs_take_the_plain_path():
    x = torch.randn(1, 4, 8, 8, requires_grad=True)
    assert DepthwiseConv2d(4, 3)(x).grad_fn.name() == 'ConvolutionBackward0'
    big = DepthwiseConv2d(4, 7)
    assert owns_weight_grad(big, x) and not owns_weight_grad(DepthwiseConv2d(4, 3), x)
    with torch.no_grad():
        assert big(x).grad_fn is None
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert big(x).grad_fn.name() != 'TokenMapConvFunctionBackward'


def test_meta_tensors_take_the_plain_path():
    """Shape-only runs (meta tensors, as the structure checks build) keep
    the plain convolution: autocast cannot be asked about the meta device."""
    conv = DepthwiseConv2d(4, 5).to('meta')
    x = torch.empty(1, 4, 8, 8, device='meta', requires_grad=True)
    assert conv(x).shape == (1, 4, 8, 8)


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


def test_depthwise_conv_large_kernels_take_the_plain_path():
    big = DepthwiseConv2d(8, CHANNELS_LAST_MAX_DEPTHWISE_KERNEL + 2)
    small = DepthwiseConv2d(8, CHANNELS_LAST_MAX_DEPTHWISE_KERNEL)
    x = tokens_to_map(torch.randn(1, 20 * 20, 8), (20, 20))
    assert token_map_layout(big) is torch.contiguous_format
    assert token_map_layout(small) is torch.channels_last
    assert big(x).is_contiguous() and small(x).stride(1) == 1


@pytest.mark.parametrize('cin,cout,kernel,stride', [(8, 16, 3, 2), (12, 12, 4, 4), (6, 10, 1, 1)])
def test_token_map_conv_equals_conv2d(cin, cout, kernel, stride):
    """Strided / patch-embedding convs on token maps: channels-last in and out
    (1x1 convs take the plain path: no faster), the result of nn.Conv2d."""
    torch.manual_seed(0)
    conv = TokenMapConv2d(cin, cout, kernel, stride, kernel // 2 if kernel == 3 else 0)
    plain = nn.Conv2d(cin, cout, kernel, stride, kernel // 2 if kernel == 3 else 0)
    plain.load_state_dict(conv.state_dict())
    x = tokens_to_map(torch.randn(2, 12 * 16, cin), (12, 16)).requires_grad_()
    out, ref = conv(x), plain(x.detach().contiguous())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert (token_map_layout(conv) is torch.channels_last) == (kernel > 1)
    if kernel > 1:
        assert out.is_contiguous(memory_format=torch.channels_last)
    out.sum().backward()
    assert conv.weight.grad is not None and x.grad is not None

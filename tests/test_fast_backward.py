"""Layers with their own backward for speed: large depthwise convolutions
(weight gradient as a convolution, ``vattn_mm/layers/conv.py``) and the
ConvFFN over groups of hidden channels (``ffn.py``); LITv2's deformable
convolution and DilateFormer's dilated attention are tested in tests/ops/.
Their gradients must be those of the plain operators."""
import pytest
import torch
import torch.nn.functional as F

from vattn_mm.layers import DepthwiseConv2d
from vattn_mm.layers.conv import (DEPTHWISE_WEIGHT_GRAD_MIN_KERNEL, _ATEN,
                                  depthwise_weight_grad)


def _grads(out: torch.Tensor, inputs: list) -> list:
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), inputs)]


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
    assert type(out.grad_fn).__name__ == '_TokenMapConvBackward'
    ours = _grads(out, [leaf, *conv.parameters()])
    plain = _grads(F.conv2d(x, conv.weight, conv.bias, stride, conv.padding, dilation, 6),
                   [leaf, *conv.parameters()])
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_depthwise_weight_grad_is_atens():
    torch.manual_seed(0)
    conv = DepthwiseConv2d(5, 9, stride=2)
    x, grad = torch.randn(2, 5, 17, 14), torch.randn(2, 5, 9, 7)
    expected = _ATEN.convolution_backward(grad, x, conv.weight, None, conv.stride, conv.padding,
                                          conv.dilation, False, [0, 0], 5,
                                          [False, True, False])[1]
    torch.testing.assert_close(depthwise_weight_grad(grad, x, conv), expected,
                               rtol=1e-4, atol=1e-5)


def test_small_or_untrained_depthwise_convs_take_the_plain_path():
    x = torch.randn(1, 4, 8, 8, requires_grad=True)
    assert DepthwiseConv2d(4, 3)(x).grad_fn.name() == 'ConvolutionBackward0'
    big = DepthwiseConv2d(4, 7)
    with torch.no_grad():
        assert big(x).grad_fn is None
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert big(x).grad_fn.name() != '_TokenMapConvBackward'


def test_meta_tensors_take_the_plain_path():
    """Shape-only runs (meta tensors, as the structure checks build) keep
    the plain convolution: autocast cannot be asked about the meta device."""
    conv = DepthwiseConv2d(4, 5).to('meta')
    x = torch.empty(1, 4, 8, 8, device='meta', requires_grad=True)
    assert conv(x).shape == (1, 4, 8, 8)


def _conv_ffn(pre_act, act, hidden=40):
    from vattn_mm.layers import ConvFFN
    torch.manual_seed(0)
    return ConvFFN(6, hidden, act_cfg=dict(type=act),
                   pre_act_cfg=pre_act and dict(type=pre_act)).double()


@pytest.mark.parametrize('pre_act, act, batch, hw, budget, kernel', [
    ('HSwish', 'HSwish', 1, (7, 9), 1, 3),        # P2T; three uneven channel groups
    (None, 'GELU', 2, (5, 4), 1, 3),              # PVTv2
    ('ReLU', 'GELU', 1, (1, 3), 1 << 20, 3),      # PVTv2-li; one group
    (None, 'GELU', 2, (6, 7), 1, 5),              # own depthwise weight gradient per group
])
def test_grouped_conv_ffn_is_the_plain_ffn(pre_act, act, batch, hw, budget, kernel, monkeypatch):
    """ConvFFN over groups of hidden channels (``vattn_mm/layers/ffn.py``)."""
    import vattn_mm.layers.ffn as ffn_module
    monkeypatch.setattr(ffn_module, 'HIDDEN_GROUP_BYTES', budget)
    ffn = _conv_ffn(pre_act, act)
    if kernel != 3:
        ffn.dwconv = DepthwiseConv2d(40, kernel).double()
        assert ffn.dwconv.own_weight_grad
    x = torch.randn(batch, hw[0] * hw[1], 6, dtype=torch.double, requires_grad=True)
    out = ffn(x, hw)
    assert type(out.grad_fn).__name__ == '_HiddenGroupsConvFFNBackward'
    ours = _grads(out, [x, *ffn.parameters()])
    monkeypatch.setattr(ffn_module, 'hidden_groups_apply', lambda *args: False)
    plain = _grads(ffn(x, hw), [x, *ffn.parameters()])
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_grouped_conv_ffn_with_frozen_parts(monkeypatch):
    """Only the gradients asked for, each still the plain FFN's."""
    import vattn_mm.layers.ffn as ffn_module
    monkeypatch.setattr(ffn_module, 'HIDDEN_GROUP_BYTES', 1)
    ffn = _conv_ffn('HSwish', 'HSwish')
    ffn.fc1.requires_grad_(False)
    ffn.dwconv.bias.requires_grad_(False)
    x = torch.randn(2, 12, 6, dtype=torch.double)
    trained = [p for p in ffn.parameters() if p.requires_grad]
    out = ffn(x, (3, 4))
    assert type(out.grad_fn).__name__ == '_HiddenGroupsConvFFNBackward'
    ours = _grads(out, trained)
    monkeypatch.setattr(ffn_module, 'hidden_groups_apply', lambda *args: False)
    for a, b in zip(ours, _grads(ffn(x, (3, 4)), trained)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_hidden_groups_cover_the_channels_within_the_budget():
    from vattn_mm.layers.ffn import hidden_groups
    for tokens, hidden, budget in [(16384, 512, 8 << 20), (67200, 512, 8 << 20),
                                   (100, 40, 1), (10, 7, 1 << 20)]:
        groups = hidden_groups(tokens, hidden, 4, budget)
        assert [c for g in groups for c in range(hidden)[g]] == list(range(hidden))
        widths = {g.stop - g.start for g in groups}
        assert max(widths) - min(widths) <= 1
        assert max(widths) * tokens * 4 <= budget or max(widths) <= 16

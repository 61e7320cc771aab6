"""Layers with their own backward for speed: LITv2's deformable convolution
(gathered DCNv1, ``deformable_merging.py``) and DilateFormer's dilated
attention (``dilated_attention.py``); the depthwise convolutions' and the
ConvFFN's are in ``tests/ops/``.  Their gradients must be those of the plain
operators."""
import pytest
import torch
from torch import nn

from vattn_mm.layers.deformable_merging import BiasedDeformConv2d, _dcn_v1

from .ops.grads import weighted_grads as _grads


def _dcn_case(batch, kernel, stride, padding, offset_scale, channels_last, seed=0):
    g = torch.Generator().manual_seed(seed)
    c, out_ch, h, w = 5, 4, 9, 11
    x = torch.randn(batch, c, h, w, generator=g, dtype=torch.double)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    oh, ow = (h + 2 * padding - kernel) // stride + 1, (w + 2 * padding - kernel) // stride + 1
    offset = torch.randn(batch, 2 * kernel * kernel, oh, ow, generator=g,
                         dtype=torch.double) * offset_scale
    weight = torch.randn(out_ch, c, kernel, kernel, generator=g, dtype=torch.double)
    bias = torch.randn(out_ch, generator=g, dtype=torch.double)
    return [t.requires_grad_() for t in (x, offset, weight, bias)]


@pytest.mark.parametrize('batch, kernel, stride, padding, offset_scale, channels_last', [
    (1, 2, 2, 0, 1.0, True),     # LITv2's token merging
    (2, 3, 1, 1, 4.0, False),    # samples far outside the map
    (2, 2, 2, 0, 0.0, True),     # zero offsets: every sample on a pixel (the gradient's kink)
    (1, 3, 2, 1, 0.5, False)])
def test_gathered_deform_conv_is_dcn_v1(batch, kernel, stride, padding, offset_scale,
                                        channels_last):
    _assert_equals_dcn_v1(_dcn_case(batch, kernel, stride, padding, offset_scale,
                                    channels_last), kernel, stride, padding)


class _GivenOffsets(nn.Module):
    def __init__(self, offset: torch.Tensor):
        super().__init__()
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.offset


def _assert_equals_dcn_v1(tensors: list, kernel: int, stride: int, padding: int) -> None:
    """``BiasedDeformConv2d`` with these input, offsets, weight and bias:
    outputs and gradients equal torchvision's DCNv1."""
    x, offset, weight, bias = tensors
    conv = BiasedDeformConv2d(x.shape[1], weight.shape[0], kernel, stride, padding).double()
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
    conv.conv_offset = _GivenOffsets(offset)
    out = conv(x)
    assert type(out.grad_fn).__name__ == '_GatheredDeformConvBackward'
    ours = _grads(out, [x, offset, conv.weight, conv.bias])
    torchvision = _grads(_dcn_v1(*tensors, stride, padding), tensors)
    for a, b in zip(ours, torchvision):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_gathered_deform_conv_on_the_boundary_of_the_map_is_mmcvs():
    """Samples exactly one pixel outside (-1) read zero and pass no offset
    gradient, as in mmcv's kernel, which the official LITv2 runs
    (torchvision's offset gradient differs there)."""
    from mmcv.ops import deform_conv2d
    x, offset, weight, bias = (t.detach().float() for t in _dcn_case(1, 2, 2, 0, 0.0, True))
    offset[:, 0::2, 0] = -1.0             # first output row: its taps one row up
    offset[:, 1::2, :, -1] = 1.0          # last output column: one column right
    tensors = [t.requires_grad_() for t in (x, offset, weight, bias)]
    conv = BiasedDeformConv2d(5, 4, 2, 2)
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
    conv.conv_offset = _GivenOffsets(offset)
    ours = _grads(conv(x), [x, offset, conv.weight, conv.bias])
    mmcv = _grads(deform_conv2d(x.contiguous(), offset.contiguous(), weight, 2, 0)
                  + bias.view(1, -1, 1, 1), tensors)
    for a, b in zip(ours, mmcv):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_deform_conv_outside_cpu_training_is_torchvisions():
    conv = BiasedDeformConv2d(4, 6, 2, 2)
    x = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        assert conv(x).grad_fn is None
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert 'Gathered' not in type(conv(x).grad_fn).__name__


@pytest.mark.parametrize('size, kernel, dilation', [((7, 9), 3, 2), ((3, 4), 3, 3), ((6, 5), 5, 1)])
def test_dilated_attention_gradients_are_autograds(size, kernel, dilation):
    """Its own backward against autograd through the export formulation
    (padded maps, no in-place writes); (3, 4) with dilation 3 has offsets
    entirely outside the map."""
    from vattn_mm.layers.dilated_attention import (dilated_local_attention,
                                                   dilated_local_attention_padded)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, *size, 2, 3, generator=g, dtype=torch.double, requires_grad=True)
               for _ in range(3))
    out = dilated_local_attention(q, k, v, kernel, dilation, 0.7)
    assert type(out.grad_fn).__name__ == '_DilatedLocalAttentionBackward'
    ours = _grads(out, [q, k, v])
    plain = _grads(dilated_local_attention_padded(q, k, v, kernel, dilation, 0.7), [q, k, v])
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)

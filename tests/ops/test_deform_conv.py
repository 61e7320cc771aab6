"""DCNv1 (``vattn_mm/ops/deform_conv.py``): the gathered form LITv2's
deformable token merging trains with is torchvision's operator with mmcv's
boundary conventions, and the fast path on or off gives the same values."""
import pytest
import torch
from torch import nn

from vattn_mm import ops
from vattn_mm.layers import BiasedDeformConv2d
from vattn_mm.ops.deform_conv import dcn_v1

from .grads import assert_all_close, weighted_grads


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


def _conv_with(tensors: list, kernel: int, stride: int, padding: int) -> BiasedDeformConv2d:
    """A ``BiasedDeformConv2d`` with the weight, bias and offsets in ``tensors``
    (input, offsets, weight, bias)."""
    _, offset, weight, bias = tensors
    conv = BiasedDeformConv2d(weight.shape[1], weight.shape[0], kernel, stride, padding)
    conv.to(weight.dtype)
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
    conv.conv_offset = _GivenOffsets(offset)
    return conv


def _assert_equals_dcn_v1(tensors: list, kernel: int, stride: int, padding: int) -> None:
    """``BiasedDeformConv2d`` with these input, offsets, weight and bias:
    outputs and gradients equal torchvision's DCNv1."""
    x, offset, _, _ = tensors
    conv = _conv_with(tensors, kernel, stride, padding)
    out = conv(x)
    assert type(out.grad_fn).__name__ == 'GatheredDeformConvBackward'
    ours = weighted_grads(out, [x, offset, conv.weight, conv.bias])
    torchvision = weighted_grads(dcn_v1(*tensors, stride, padding), tensors)
    assert_all_close(ours, torchvision, 1e-10)


@pytest.mark.needs('mmcv.ops')
def test_gathered_deform_conv_on_the_boundary_of_the_map_is_mmcvs():
    """Samples exactly one pixel outside (-1) read zero and pass no offset
    gradient, as in mmcv's kernel, which the official LITv2 runs
    (torchvision's offset gradient differs there)."""
    from mmcv.ops import deform_conv2d
    x, offset, weight, bias = (t.detach().float() for t in _dcn_case(1, 2, 2, 0, 0.0, True))
    offset[:, 0::2, 0] = -1.0             # first output row: its taps one row up
    offset[:, 1::2, :, -1] = 1.0          # last output column: one column right
    tensors = [t.requires_grad_() for t in (x, offset, weight, bias)]
    conv = _conv_with(tensors, 2, 2, 0)
    ours = weighted_grads(conv(x), [x, offset, conv.weight, conv.bias])
    mmcv = weighted_grads(deform_conv2d(x.contiguous(), offset.contiguous(), weight, 2, 0)
                          + bias.view(1, -1, 1, 1), tensors)
    assert_all_close(ours, mmcv, 1e-5)


def test_deform_conv_outside_cpu_training_is_torchvisions():
    conv = BiasedDeformConv2d(4, 6, 2, 2)
    x = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        assert conv(x).grad_fn is None
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert 'Gathered' not in type(conv(x).grad_fn).__name__


def test_gathered_deform_conv_switch():
    """``gathered_deform_conv`` on (the CPU default) vs off (torchvision's
    operator): the same outputs and gradients (float64, 1e-10)."""
    tensors = _dcn_case(2, 2, 2, 0, 1.0, True)
    conv = _conv_with(tensors, 2, 2, 0)
    x, offset = tensors[:2]
    inputs = [x, offset, conv.weight, conv.bias]
    on = conv(x)
    assert type(on.grad_fn).__name__ == 'GatheredDeformConvBackward'
    ops.configure(conv, {'gathered_deform_conv': False})
    off = conv(x)
    assert 'Gathered' not in type(off.grad_fn).__name__
    assert_all_close(weighted_grads(on, inputs), weighted_grads(off, inputs), 1e-10)

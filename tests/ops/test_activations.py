"""The one table of activations the fast paths handle
(``vattn_mm/ops/activations.py``): each entry's gradient kernel is
autograd's gradient of the activation, and its oneDNN post-op computes the
activation."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vattn_mm.ops.activations import ACTIVATIONS, act_grad, fused_post_op
from vattn_mm.ops.fused import FUSED_ACT_AVAILABLE

#: an instance of every configuration of each listed activation
INSTANCES = [nn.GELU(), nn.GELU(approximate='tanh'), nn.ReLU(), nn.Hardswish()]


def test_every_listed_activation_is_checked():
    assert {type(act) for act in INSTANCES} == set(ACTIVATIONS)
    assert fused_post_op(nn.SiLU()) is None


@pytest.mark.parametrize('act', INSTANCES, ids=repr)
def test_gradient_kernel_is_autograds(act):
    torch.manual_seed(0)
    h = torch.randn(4, 37, dtype=torch.float64) * 4   # both sides of every kink
    grad = torch.randn_like(h)
    expected, = torch.autograd.grad(act(h.requires_grad_()), h, grad)
    h = h.detach()
    torch.testing.assert_close(act_grad(act, grad, h), expected, rtol=1e-12, atol=1e-12)
    buffer = grad.clone()       # written in place where the kernel can
    torch.testing.assert_close(act_grad(act, buffer, h, out=buffer), expected,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not FUSED_ACT_AVAILABLE, reason='this PyTorch build lacks the oneDNN fused ops')
@pytest.mark.parametrize('act', INSTANCES, ids=repr)
def test_post_op_computes_the_activation(act):
    torch.manual_seed(0)
    linear = nn.Linear(16, 24)
    x = torch.randn(10, 16) * 3
    attr, algorithm = fused_post_op(act)
    with torch.no_grad():
        fused = torch.ops.mkldnn._linear_pointwise(x, linear.weight, linear.bias, attr, [],
                                                   algorithm)
        torch.testing.assert_close(fused, act(F.linear(x, linear.weight, linear.bias)),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('act', INSTANCES, ids=repr)
@pytest.mark.parametrize('grad_layout, h_layout', [('channels_last', 'contiguous'),
                                                   ('contiguous', 'channels_last')])
def test_act_grad_with_operands_of_two_layouts(act, grad_layout, h_layout):
    """The gradient of a map whose output gradient has another memory layout
    than its input equals the gradient with both contiguous, written to
    ``out`` or not (torch 2.1's CPU gelu_backward read a channels-last
    gradient beside a contiguous input wrong)."""
    torch.manual_seed(0)
    grad, h = torch.randn(2, 16, 7, 9), torch.randn(2, 16, 7, 9)
    expected = act_grad(act, grad, h)
    layout = {'contiguous': torch.contiguous_format, 'channels_last': torch.channels_last}
    grad_mixed = grad.contiguous(memory_format=layout[grad_layout])
    h_mixed = h.contiguous(memory_format=layout[h_layout])
    torch.testing.assert_close(act_grad(act, grad_mixed, h_mixed), expected, rtol=1e-6, atol=1e-6)
    written = act_grad(act, grad_mixed.clone(), h_mixed, out=grad_mixed)
    torch.testing.assert_close(written, expected, rtol=1e-6, atol=1e-6)

"""Multi-scale dilated attention (DilateFormer's MSDA) against the official
``nn.Unfold`` formulation: outputs, gradients, training memory, bands."""
import pytest
import torch
from torch import nn

from vattn_mm.layers import MultiScaleDilatedAttention


def unfold_msda(module: MultiScaleDilatedAttention, x: torch.Tensor, hw) -> torch.Tensor:
    """The official formulation (``nn.Unfold`` copies of keys and values),
    written independently of the layer under test."""
    b, n, c = x.shape
    h, w = hw
    groups = len(module.dilation)
    ks, hd = module.kernel_size, module.head_dims
    heads = c // groups // hd
    qkv = module.qkv(x.transpose(1, 2).reshape(b, c, h, w))
    qkv = qkv.reshape(b, 3, groups, c // groups, h, w).permute(2, 1, 0, 3, 4, 5)
    outs = []
    for g, d in enumerate(module.dilation):
        unfold = nn.Unfold(ks, d, d * (ks - 1) // 2, 1)
        q, k, v = qkv[g]
        q = q.reshape(b, heads, hd, 1, n).permute(0, 1, 4, 3, 2)
        k = unfold(k).reshape(b, heads, hd, ks * ks, n).permute(0, 1, 4, 2, 3)
        attn = ((q @ k) * module.scale).softmax(-1)
        v = unfold(v).reshape(b, heads, hd, ks * ks, n).permute(0, 1, 4, 3, 2)
        outs.append((attn @ v).transpose(1, 2).reshape(b, n, c // groups))
    return module.proj(torch.cat(outs, -1))


@pytest.mark.parametrize('hw,dilation,kernel_size', [
    ((13, 17), (1, 2, 3), 3), ((7, 5), (1, 2, 3), 3), ((3, 8), (2, 4), 3),
    ((1, 1), (1, 2, 3), 3), ((9, 11), (1, 3), 5), ((6, 4), (1, ), 7)])
def test_msda_equals_unfold_reference(hw, dilation, kernel_size):
    torch.manual_seed(0)
    c = 24
    module = MultiScaleDilatedAttention(c, num_heads=2 * len(dilation),
                                        kernel_size=kernel_size, dilation=dilation)
    module.double()
    x = torch.randn(2, hw[0] * hw[1], c, dtype=torch.float64, requires_grad=True)
    out = module(x, hw)
    ref = unfold_msda(module, x, hw)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(out)
    params = [x, *module.parameters()]
    ours = torch.autograd.grad((out * g).sum(), params)
    theirs = torch.autograd.grad((ref * g).sum(), params)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def _saved_bytes(fn) -> int:
    """Bytes of the distinct storages autograd keeps for backward."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def test_msda_keeps_no_unfolded_copies():
    """Training memory: the per-offset formulation saves about q, k, v and
    the input (~5 maps), the unfold one the k*k copies of k and v (~20)."""
    torch.manual_seed(0)
    c, hw = 48, (40, 48)
    module = MultiScaleDilatedAttention(c, num_heads=3)
    x = torch.randn(1, hw[0] * hw[1], c, requires_grad=True)
    one_map = x.numel() * x.element_size()
    ours = _saved_bytes(lambda: module(x, hw))
    theirs = _saved_bytes(lambda: unfold_msda(module, x, hw))
    assert ours < 6 * one_map, ours / one_map
    assert theirs > 3 * ours, (theirs / one_map, ours / one_map)


@pytest.mark.parametrize('hw,chunk', [((11, 7), 14), ((9, 13), 13), ((10, 6), 1)])
def test_msda_bands_in_inference_are_exact(hw, chunk):
    """Without autograd a map larger than chunk_tokens goes in row bands with
    halos (down to one row per band): same result as the whole map and as
    the unfold reference, dilations up to 3 reaching across bands."""
    torch.manual_seed(0)
    module = MultiScaleDilatedAttention(12, num_heads=3, chunk_tokens=chunk).eval()
    x = torch.randn(2, hw[0] * hw[1], 12)
    with torch.no_grad():
        banded = module(x, hw)
        module.chunk_tokens = None
        whole = module(x, hw)
        reference = unfold_msda(module, x, hw)
    torch.testing.assert_close(banded, whole, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(banded, reference, rtol=1e-5, atol=1e-5)

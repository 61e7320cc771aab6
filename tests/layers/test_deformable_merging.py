"""Deformable token merging (``vattn_mm/layers/tokens.py``)
against torchvision's DCNv1 + norm + GELU: odd sizes, zero offsets,
gradients, CUDA."""
import pytest
import torch
import torch.nn.functional as F

from vattn_mm.layers import DeformableTokenMerging


def dtm_reference(m: DeformableTokenMerging, x: torch.Tensor) -> torch.Tensor:
    from torchvision.ops import deform_conv2d
    d = m.dconv
    y = deform_conv2d(x, d.conv_offset(x), d.weight, d.bias, stride=2)
    return F.gelu(m.norm(y))


@pytest.mark.parametrize('size', [(9, 11), (8, 8), (2, 5)])
def test_dtm_odd_sizes_match_reference(size):
    torch.manual_seed(0)
    m = DeformableTokenMerging(6, 12)
    torch.nn.init.normal_(m.dconv.conv_offset.weight, std=0.5)   # O(1 px) offsets
    torch.nn.init.normal_(m.dconv.conv_offset.bias, std=0.3)
    m.norm.running_mean.normal_()
    m.eval()
    x = torch.randn(5, 6, *size)  # odd batch: the official op rejects odd batches >= 5
    tokens, hw = m(x)
    assert hw == (size[0] // 2, size[1] // 2)
    ref = dtm_reference(m, x)
    torch.testing.assert_close(tokens, ref.flatten(2).transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_dtm_zero_offsets_is_strided_conv_and_backward():
    m = DeformableTokenMerging(4, 8).eval()
    x = torch.randn(3, 4, 7, 9, requires_grad=True)
    tokens, hw = m(x)
    conv = F.conv2d(x, m.dconv.weight, m.dconv.bias, stride=2)
    ref = F.gelu(m.norm(conv)).flatten(2).transpose(1, 2)
    torch.testing.assert_close(tokens, ref, rtol=1e-5, atol=1e-5)
    tokens.square().sum().backward()
    assert x.grad.abs().sum() > 0
    assert m.dconv.conv_offset.weight.grad.abs().sum() > 0    # offsets learn
    assert m.dconv.bias.grad.abs().sum() > 0
    with pytest.raises(ValueError, match='1x4 map is smaller than its 2x2 kernel'):
        m(torch.randn(1, 4, 1, 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_dtm_cuda_matches_cpu():
    m = DeformableTokenMerging(8, 16)
    torch.nn.init.normal_(m.dconv.conv_offset.weight, std=0.5)
    m.eval()
    x = torch.randn(3, 8, 13, 10)
    cpu, _ = m(x)
    gpu, _ = m.cuda()(x.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('setting', ['default', 'plain'])
@pytest.mark.parametrize('batch', [1, 2])
def test_dtm_gradients_with_either_deformable_kernel(setting, batch):
    """Finite differences agree with the DTM's gradients whichever DCN kernel
    runs (the gathered fast path returns a channels-last map, torchvision's a
    contiguous one), batch 1 included."""
    from vattn_mm import ops
    torch.manual_seed(0)
    dtm = ops.configure(DeformableTokenMerging(4, 8).double().train(), setting)
    with torch.no_grad():
        for param in dtm.parameters():   # off zero offsets, the kink of bilinear sampling
            param.add_(torch.randn_like(param), alpha=0.05)
    x = torch.randn(batch, 4, 6, 6, dtype=torch.double,
                    requires_grad=True).contiguous(memory_format=torch.channels_last)
    assert torch.autograd.gradcheck(lambda t: dtm(t)[0], (x, ))

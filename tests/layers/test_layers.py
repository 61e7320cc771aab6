"""Shared layers: state-dict keys, in-place residuals in inference."""
import pytest
import torch

from vattn_mm.layers import DepthwiseConv2d


def test_depthwise_conv_keys_are_conv2d_keys():
    conv = DepthwiseConv2d(8, 5, stride=2, dilation=2)
    assert set(conv.state_dict()) == {'weight', 'bias'}
    assert conv.weight.shape == (8, 1, 5, 5) and conv.groups == 8
    assert conv.padding == (4, 4) and conv.stride == (2, 2)


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

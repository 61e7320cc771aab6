"""Linear / convolution + activation as one oneDNN call in CPU inference
(``fused_act``, ``vattn_mm/ops/fused.py``): the plain path's result, and the
plain path wherever the fused call would be noticed."""
import pytest
import torch

from vattn_mm.layers import MLP, ConvFFN, FocalModulation
from vattn_mm.ops import fused
from vattn_mm.ops.fused import FUSED_ACT_AVAILABLE


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

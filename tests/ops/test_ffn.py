"""FFN schedules (``vattn_mm/ops/conv.py``, ``vattn_mm/ops/autograd.py``):
ConvFFN training over groups of hidden channels (``ffn_hidden_groups``) and
MLP inference in chunks of tokens (``mlp_inference_chunks``) give the plain
FFN's values and gradients."""
import pytest
import torch

from vattn_mm import ops
from vattn_mm.layers import MLP, ConvFFN, DepthwiseConv2d
from vattn_mm.ops import conv as ffn_ops
from vattn_mm.ops.conv import owns_weight_grad

from .grads import weighted_grads

UNGROUPED = {'ffn_hidden_groups': False}


def _conv_ffn(pre_act, act, hidden=40):
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
    monkeypatch.setattr(ffn_ops, 'HIDDEN_GROUP_BYTES', budget)
    ffn = _conv_ffn(pre_act, act)
    x = torch.randn(batch, hw[0] * hw[1], 6, dtype=torch.double, requires_grad=True)
    if kernel != 3:
        ffn.dwconv = DepthwiseConv2d(40, kernel).double()
        assert owns_weight_grad(ffn.dwconv, x)
    out = ffn(x, hw)
    assert type(out.grad_fn).__name__ == 'HiddenGroupsConvFFNBackward'
    ours = weighted_grads(out, [x, *ffn.parameters()])
    ops.configure(ffn, UNGROUPED)
    plain = weighted_grads(ffn(x, hw), [x, *ffn.parameters()])
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_grouped_conv_ffn_with_frozen_parts(monkeypatch):
    """Only the gradients asked for, each still the plain FFN's."""
    monkeypatch.setattr(ffn_ops, 'HIDDEN_GROUP_BYTES', 1)
    ffn = _conv_ffn('HSwish', 'HSwish')
    ffn.fc1.requires_grad_(False)
    ffn.dwconv.bias.requires_grad_(False)
    x = torch.randn(2, 12, 6, dtype=torch.double)
    trained = [p for p in ffn.parameters() if p.requires_grad]
    out = ffn(x, (3, 4))
    assert type(out.grad_fn).__name__ == 'HiddenGroupsConvFFNBackward'
    ours = weighted_grads(out, trained)
    ops.configure(ffn, UNGROUPED)
    for a, b in zip(ours, weighted_grads(ffn(x, (3, 4)), trained)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_hidden_groups_cover_the_channels_within_the_budget():
    for tokens, hidden, budget in [(16384, 512, 8 << 20), (67200, 512, 8 << 20),
                                   (100, 40, 1), (10, 7, 1 << 20)]:
        groups = ffn_ops.hidden_groups(tokens, hidden, 4, budget)
        assert [c for g in groups for c in range(hidden)[g]] == list(range(hidden))
        widths = {g.stop - g.start for g in groups}
        assert max(widths) - min(widths) <= 1
        assert max(widths) * tokens * 4 <= budget or max(widths) <= 16


def test_mlp_runs_long_sequences_in_chunks_without_autograd():
    """Inference splits the tokens into chunks (far less memory for the wide
    hidden layer) with the same result; with autograd it runs whole."""
    torch.manual_seed(0)
    mlp = MLP(8, 32, chunk_tokens=7).eval()
    x = torch.randn(2, 25, 8)                        # 50 tokens: 7 full chunks + 1 token
    with torch.no_grad():
        whole = mlp._inference(x)
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

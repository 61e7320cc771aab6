"""FFNs keep only the pre-activation for the backward and recompute the
activation (``recompute_act``, ``vattn_mm/ops/autograd.py``), focal
modulation its levels' activations (``focal_recompute``), the blocks their
pre-norm outputs (``recompute_norm``): same gradients, less saved."""
import pytest
import torch
from torch import nn

from vattn_mm import ops
from vattn_mm.layers import MLP, ConvFFN
from vattn_mm.ops.autograd import act_linear, norm_recomputed, recomputes_act

HW = (6, 7)


def _ffn(kind: str, act: str, drop: float = 0.) -> nn.Module:
    torch.manual_seed(0)
    if kind == 'mlp':
        return MLP(8, 24, act_cfg=dict(type=act), drop=drop)
    return ConvFFN(8, 24, act_cfg=dict(type=act), pre_act_cfg=dict(type='ReLU'), drop=drop)


def _plain(module: nn.Module) -> None:
    """Every activation kept: no recomputing path (and no ConvFFN groups,
    which recompute theirs too)."""
    ops.configure(module, dict(recompute_act=False, ffn_hidden_groups=False,
                               focal_recompute=False))


def _grads(ffn: nn.Module, x: torch.Tensor) -> list:
    x = x.detach().clone().requires_grad_()
    ffn.zero_grad()
    out = ffn(x, HW)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach(), x.grad] + [p.grad.clone() for p in ffn.parameters()]


def _saved_bytes(ffn: nn.Module, x: torch.Tensor) -> int:
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        ffn(x.detach().requires_grad_(), HW)
    params = {p.untyped_storage().data_ptr() for p in ffn.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


@pytest.mark.parametrize('kind', ['mlp', 'conv'])
@pytest.mark.parametrize('act', ['GELU', 'ReLU', 'HSwish'])
def test_recomputed_activation_gives_the_same_gradients(kind, act):
    ffn = _ffn(kind, act)
    x = torch.randn(2, HW[0] * HW[1], 8)
    h = torch.randn(3, 24, requires_grad=True)
    assert recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)
    ours = _grads(ffn, x)
    _plain(ffn)
    plain = _grads(ffn, x)
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('kind', ['mlp', 'conv'])
def test_recomputed_activation_saves_one_hidden_map_less(kind):
    ffn = _ffn(kind, 'GELU')
    x = torch.randn(1, HW[0] * HW[1], 8)
    hidden = x.shape[1] * 24 * 4
    ours = _saved_bytes(ffn, x)
    _plain(ffn)
    assert _saved_bytes(ffn, x) - ours == hidden


def test_recompute_only_where_nothing_else_would_notice():
    ffn = _ffn('mlp', 'GELU', drop=0.1)
    h = torch.randn(3, 24, requires_grad=True)
    assert not recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)       # dropout mask
    ffn.eval()
    assert recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)
    with torch.no_grad():
        assert not recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert not recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)
    assert not recomputes_act(h, nn.SiLU(), ffn.fc2, ffn.drop)      # no backward kernel listed
    assert not recomputes_act(h, nn.ReLU(inplace=True), ffn.fc2, ffn.drop)   # would overwrite h
    handle = ffn.fc2.register_forward_hook(lambda *args: None)
    assert not recomputes_act(h, ffn.act, ffn.fc2, ffn.drop)
    handle.remove()
    # the fallback is the plain composition
    torch.testing.assert_close(act_linear(h, nn.SiLU(), ffn.fc2, nn.Identity(), ffn.recompute_act),
                               ffn.fc2(nn.functional.silu(h)))


def test_recomputed_activation_under_activation_checkpointing():
    """``with_cp`` re-runs the forward in the backward: gradients unchanged."""
    from torch.utils.checkpoint import checkpoint
    ffn = _ffn('conv', 'GELU')
    x = torch.randn(1, HW[0] * HW[1], 8)
    plain = _grads(ffn, x)
    x = x.detach().clone().requires_grad_()
    ffn.zero_grad()
    out = checkpoint(ffn, x, HW, use_reentrant=False)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    for a, b in zip([out.detach(), x.grad] + [p.grad for p in ffn.parameters()], plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('level, window, normalize', [(2, 3, False), (3, 3, True), (1, 13, False)])
def test_focal_context_recomputes_its_activations(level, window, normalize):
    """Focal modulation's context levels (kernels 3 / 5 / 7, one above the
    channels-last limit): gradients of every input and weight as autograd's,
    and the levels' activations are not stored."""
    from vattn_mm.layers import FocalModulation
    torch.manual_seed(0)
    mixer = FocalModulation(8, focal_level=level, focal_window=window,
                            normalize_modulator=normalize)
    x = torch.randn(2, HW[0] * HW[1], 8)
    ours, ours_saved = _grads(mixer, x), _saved_bytes(mixer, x)
    _plain(mixer)
    plain, plain_saved = _grads(mixer, x), _saved_bytes(mixer, x)
    for a, b in zip(ours, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    one_map = x.numel() * 4
    assert plain_saved - ours_saved >= level * one_map


def _block():
    from vattn_mm.layers import SpatialReductionAttention, TokenBlock
    torch.manual_seed(0)
    return TokenBlock(16, SpatialReductionAttention(16, 2, sr_ratio=2), MLP(16, 32))


def _stored_inputs(block: nn.Module, x: torch.Tensor) -> list:
    """Whether the mixer's and the FFN's inputs (the norm outputs) are still
    held after the forward, i.e. stored for the backward."""
    refs = []
    hooks = [m.register_forward_pre_hook(
        lambda m, args: refs.append(args[0].untyped_storage()._weak_ref()))
        for m in (block.attn, block.ffn)]
    out = block(x.detach().requires_grad_(), HW)
    alive = [not torch.UntypedStorage._expired(ref) for ref in refs]
    del out
    for hook in hooks:
        hook.remove()
    return alive


@pytest.mark.skipif(bool(ops.FAST_PATHS['recompute_norm'].unavailable),
                    reason=str(ops.FAST_PATHS['recompute_norm'].unavailable))
def test_pre_norm_output_is_recomputed_not_stored():
    """The block's norm outputs (read by the mixer's and the FFN's first
    linears, and the spatial-reduction conv through a map view) are not
    stored; gradients as autograd's, also under activation checkpointing."""
    from torch.utils.checkpoint import checkpoint
    block = _block()
    x = torch.randn(2, HW[0] * HW[1], 16)
    ours = _grads(block, x)
    assert _stored_inputs(block, x) == [False, False]
    cp = [x.detach().clone().requires_grad_()]
    block.zero_grad()
    out = checkpoint(block, cp[0], HW, use_reentrant=False)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    cp = [out.detach(), cp[0].grad] + [p.grad.clone() for p in block.parameters()]
    ops.configure(block, dict(recompute_norm=False))
    plain = _grads(block, x)
    assert _stored_inputs(block, x) == [True, True]
    for a, b, c in zip(ours, plain, cp):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(c, b, rtol=1e-5, atol=1e-6)


def test_norm_output_changed_in_place_is_stored():
    """A saved view of the norm output that was changed in place is stored
    as it is, not recomputed from the norm."""
    norm = nn.LayerNorm(8)
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    with norm_recomputed(x, norm, ops.switch('recompute_norm')) as y:
        z = y * 1
        z.mul_(2)
        out = z @ w
    out.sum().backward()
    torch.testing.assert_close(w.grad, (norm(x) * 2).sum(0)[:, None].expand(8, 8).detach())

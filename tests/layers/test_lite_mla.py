"""EfficientViT's LiteMLA (vattn_mm/layers/lite_mla.py) against the official
module's outputs (fixtures from mit-han-lab/efficientvit, linear and quadratic
branch), a literal reference written here (forward and gradients, odd sizes),
linear memory in the number of tokens, float32 attention under autocast and
argument errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from vattn_mm.layers import MIXERS, LiteMLA, build_mixer, map_to_tokens, tokens_to_map

from ..golden import GOLDEN, assert_outputs_match, load_fixture

CASES = {'efficientvit_litemla': True, 'efficientvit_litemla_quadratic': False}
MATMULS = (torch.ops.aten.bmm.default, torch.ops.aten.mm.default)


def official_case(name: str) -> tuple[dict, dict]:
    rec = load_fixture(GOLDEN / 'mixers' / f'{name}.pt')
    return rec, {k: v for k, v in rec['arch'].items() if k != 'meaning'}


def run_map(module: LiteMLA, x: torch.Tensor) -> torch.Tensor:
    """The mixer on a (B, C, H, W) map, as a map."""
    tokens, hw = map_to_tokens(x)
    return tokens_to_map(module(tokens.contiguous(), hw), hw)


def reference(sd: dict, x: torch.Tensor, dim: int, scales=(5, ), eps: float = 1e-15,
              bn_eps: float = 1e-5) -> torch.Tensor:
    """Literal LiteMLA on a (B, C, H, W) map from official-key weights ``sd``:
    convs, then every head on its own through the N x N ReLU scores."""
    qkv = F.conv2d(x, sd['qkv.conv.weight'])
    channels = qkv.shape[1]
    branches = [qkv]
    for i, s in enumerate(scales):
        y = F.conv2d(qkv, sd[f'aggreg.{i}.0.weight'], padding=s // 2, groups=channels)
        branches.append(F.conv2d(y, sd[f'aggreg.{i}.1.weight'], groups=channels // dim))
    b, _, h, w = x.shape
    heads = []
    for y in branches:
        for head in range(channels // (3 * dim)):
            q, k, v = y[:, 3 * dim * head:3 * dim * (head + 1)].flatten(2).split(dim, dim=1)
            scores = torch.einsum('bdi,bdj->bij', q.relu(), k.relu())  # query i, key j
            weights = scores / (scores.sum(-1, keepdim=True) + eps)
            heads.append(torch.einsum('bij,bdj->bdi', weights, v))
    out = F.conv2d(torch.cat(heads, 1).view(b, -1, h, w), sd['proj.conv.weight'])
    return F.batch_norm(out, sd['proj.norm.running_mean'], sd['proj.norm.running_var'],
                        sd['proj.norm.weight'], sd['proj.norm.bias'], False, 0., bn_eps)


class ShapeRecorder(TorchDispatchMode):
    """Records the shape and dtype of every tensor an aten op returns."""

    def __init__(self):
        super().__init__()
        self.outputs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out, ):
            if isinstance(t, torch.Tensor):
                self.outputs.append((func, tuple(t.shape), t.dtype))
        return out


@pytest.mark.parametrize('name', sorted(CASES))
def test_equals_official_module(name):
    rec, arch = official_case(name)
    module = LiteMLA.from_official(rec['checkpoint'], **arch).eval()
    _, _, h, w = rec['input'].shape
    assert module.is_linear(h * w) is CASES[name]   # the official H * W > dim rule
    with torch.no_grad():
        out = run_map(module, rec['input'])
    assert_outputs_match([out], rec['outputs'], tol=1e-4)
    # the literal reference reproduces the official output too
    ref = reference(rec['checkpoint'], rec['input'], arch['dim'])
    assert_outputs_match([ref], rec['outputs'], tol=1e-5)
    assert set(module.state_dict()) == set(rec['checkpoint'])


@pytest.mark.parametrize('hw', [(7, 9), (2, 3)], ids=['linear', 'quadratic'])
def test_gradients_match_literal_reference(hw):
    rec, arch = official_case('efficientvit_litemla')
    module = LiteMLA.from_official(rec['checkpoint'], **arch).double().eval()
    sd = {k: v.double().requires_grad_(v.is_floating_point() and 'running' not in k)
          for k, v in rec['checkpoint'].items()}
    x = torch.randn(2, 32, *hw, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    weights = torch.randn(2, 32, *hw, dtype=torch.float64)
    (run_map(module, x) * weights).sum().backward()
    (reference(sd, x_ref, arch['dim']) * weights).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-9, atol=1e-10)
    params = dict(module.named_parameters())
    assert set(params) == {k for k, v in sd.items() if v.requires_grad}
    for key, p in params.items():
        assert p.grad.abs().sum() > 0, key
        torch.testing.assert_close(p.grad, sd[key].grad, rtol=1e-9, atol=1e-10, msg=key)


@pytest.mark.parametrize('hw', [(1, 1), (1, 8), (3, 3), (13, 5), (23, 17)])
def test_any_map_size_matches_literal_reference(hw):
    """Odd sizes, single tokens and both sides of the branch switch
    (N == dim = 8 quadratic, N = 9 linear)."""
    rec, arch = official_case('efficientvit_litemla')
    module = LiteMLA.from_official(rec['checkpoint'], **arch).eval()
    x = torch.randn(2, 32, *hw)
    with torch.no_grad():
        out = run_map(module, x)
    assert out.shape == x.shape
    assert_outputs_match([out], [reference(rec['checkpoint'], x, arch['dim'])], tol=1e-5)


def test_linear_branch_never_builds_a_token_by_token_tensor():
    rec, arch = official_case('efficientvit_litemla')
    module = LiteMLA.from_official(rec['checkpoint'], **arch).eval()
    h, w = 32, 48
    n = h * w
    x = torch.randn(1, 32, h, w, requires_grad=True)
    with ShapeRecorder() as rec_large:
        out = run_map(module, x)
        out.square().sum().backward()
    largest = max(math.prod(shape) for _, shape, _ in rec_large.outputs)
    assert largest < n * n // 4, f'a tensor of {largest} elements at N = {n}'
    assert not [s for _, s, _ in rec_large.outputs if s.count(n) >= 2]
    with torch.no_grad():   # the linear result equals the N x N form
        assert_outputs_match([out], [reference(rec['checkpoint'], x, arch['dim'])], tol=1e-5)
    # the official switch: N = dim = 8 tokens still take the quadratic form,
    # whose score matrix the recorder sees (and the linear form has none)
    assert not module.is_linear(8) and module.is_linear(9)
    for hw, quadratic in (((1, 8), True), ((3, 4), False)):
        n = hw[0] * hw[1]
        with ShapeRecorder() as rec_small, torch.no_grad():
            run_map(module, torch.randn(1, 32, *hw))
        scores = [s for func, s, _ in rec_small.outputs
                  if func in MATMULS and s[-2:] == (n, n)]
        assert bool(scores) is quadratic, hw


def test_attention_runs_in_float32_under_autocast():
    rec, arch = official_case('efficientvit_litemla')
    module = LiteMLA.from_official(rec['checkpoint'], **arch).eval()
    x = torch.randn(2, 32, 12, 15) * 20   # large activations: k^T v sums of ~1e4
    with torch.no_grad():
        ref = run_map(module, x)
        with ShapeRecorder() as recorder, torch.autocast('cpu', dtype=torch.bfloat16):
            low = run_map(module, x)
    matmuls = {dtype for func, _, dtype in recorder.outputs if func in MATMULS}
    convs = {dtype for func, _, dtype in recorder.outputs
             if func is torch.ops.aten.convolution.default}
    assert matmuls == {torch.float32} and convs == {torch.bfloat16}
    assert torch.isfinite(low).all()
    assert ((low.float() - ref).abs().max() / ref.abs().max()).item() < 5e-2


def test_heads_from_the_pyramid_or_head_dims():
    mixer = build_mixer(dict(type='LiteMLA'), 48, num_heads=3)
    assert type(mixer) is LiteMLA and MIXERS['LiteMLA'] is LiteMLA
    assert (mixer.heads, mixer.head_dims) == (3, 16)
    assert mixer.qkv.conv.weight.shape == (144, 48, 1, 1)
    assert mixer.proj.conv.weight.shape == (48, 96, 1, 1)   # 2 x 3 heads of 16
    mixer = build_mixer(dict(type='LiteMLA', head_dims=8, scales=(3, 5)), 48, num_heads=3)
    assert (mixer.heads, mixer.head_dims) == (6, 8)
    assert mixer.proj.conv.weight.shape == (48, 144, 1, 1)  # 3 x 6 heads of 8
    assert LiteMLA(64, head_dims=16, heads_ratio=0.5).heads == 2
    # an explicit official head count
    explicit = LiteMLA(**LiteMLA.official_kwargs(in_channels=32, out_channels=32, heads=3, dim=8))
    assert (explicit.heads, explicit.head_dims) == (3, 8)
    tokens = torch.randn(2, 35, 48)
    assert mixer(tokens, (5, 7)).shape == tokens.shape
    on_meta = mixer.to('meta')(tokens.to('meta'), (5, 7))   # shape-only analysis runs
    assert on_meta.shape == tokens.shape


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match='embed_dims 30 is not divisible by num_heads 4'):
        LiteMLA(30, num_heads=4)
    with pytest.raises(ValueError, match='scales must be odd kernel sizes'):
        LiteMLA(32, 2, scales=(4, ))
    with pytest.raises(ValueError, match='no heads'):
        LiteMLA(16, head_dims=32)
    with pytest.raises(ValueError, match=r'one value or a \(qkv, proj\) pair'):
        LiteMLA(32, 2, use_bias=(True, False, True))
    with pytest.raises(ValueError, match='in_channels 32 != out_channels 64'):
        LiteMLA.official_kwargs(in_channels=32, out_channels=64)
    with pytest.raises(ValueError, match="official norm 'ln2d' is not supported"):
        LiteMLA.official_kwargs(in_channels=32, out_channels=32, norm=('ln2d', 'bn2d'))
    with pytest.raises(ValueError, match="official activation 'mish'"):
        LiteMLA.official_kwargs(in_channels=32, out_channels=32, act_func='mish')
    with pytest.raises(ValueError, match='12 tokens do not form a 3x5 map'):
        LiteMLA(32, 2)(torch.randn(1, 12, 32), (3, 5))
    rec, arch = official_case('efficientvit_litemla')
    partial = {k: v for k, v in rec['checkpoint'].items() if k != 'aggreg.0.1.weight'}
    with pytest.raises(RuntimeError, match='aggreg.0.1.weight'):
        LiteMLA.from_official(partial, **arch)

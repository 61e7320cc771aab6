"""QuadTree attention (``vattn_mm/layers/quadtree_attention.py``) against a
dense reference: outputs, gradients, top-k clamping, sizes, dtypes."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import vattn_mm.layers.quadtree_attention as qta
from vattn_mm.backbones import QuadTree
from vattn_mm.layers import QuadtreeAttention, coarse_to_fine_attention

from ..backbone_cases import CASES

MICRO = CASES['QuadTree'].micro


def test_attention_layer_rejects_non_divisible_map():
    attn = QuadtreeAttention(16, 2, num_levels=3)
    with pytest.raises(ValueError, match='divisible by 4, got 6x10'):
        attn(torch.randn(1, 60, 16), (6, 10))


def test_topk_clamped_and_said_once(monkeypatch):
    monkeypatch.setattr(qta, '_TOPK_CLAMP_LOGGED', False)
    model = QuadTree(MICRO, topks=[32, 32, 32, 32]).eval()
    with warnings.catch_warnings(record=True) as said, torch.no_grad():
        warnings.simplefilter('always')
        for _ in range(2):
            outs = model(torch.randn(1, 3, 64, 96))   # coarsest levels: 2x3 tokens
    assert len(outs) == 4 and all(torch.isfinite(o).all() for o in outs)
    said = [str(w.message) for w in said if 'QuadtreeAttention' in str(w.message)]
    assert len(said) == 1
    assert 'top-k 32' in said[0] and 'exceeds the 6 candidate keys' in said[0]


def _parents(hw):
    h, w = hw
    rows = torch.arange(h).view(-1, 1) // 2
    cols = torch.arange(w).view(1, -1) // 2
    return (rows * (w // 2) + cols).flatten()


def dense_quadtree_reference(qs, ks, vs, sizes, topks, attn_type):
    """Per-level messages from explicit N x N attention at every level, masked
    to the children of the parents' top-k keys (quadratic; tiny inputs only)."""
    scale = qs[0].shape[-1] ** -0.5
    messages, selected, parent_attn = [], None, None
    for level, (q, k, v) in enumerate(zip(qs, ks, vs)):
        scores = q @ k.transpose(-1, -2) * scale
        if level == 0:
            allowed = torch.ones_like(scores, dtype=torch.bool)
        else:
            par = _parents(sizes[level])
            allowed = selected[:, par][:, :, par]
        if attn_type == 'B' or level == 0:
            attn = torch.softmax(scores.masked_fill(~allowed, float('-inf')), -1)
        else:   # softmax over the 4 siblings, times the parent's probability
            par = _parents(sizes[level])
            e = torch.exp(scores - scores.amax(-1, keepdim=True)) * allowed
            siblings = torch.zeros(*e.shape[:-1], e.shape[-1] // 4, dtype=e.dtype) \
                .index_add(-1, par, e)[..., par]
            attn = e / siblings.clamp_min(1e-300) * parent_attn[:, par][:, :, par]
        if level < len(qs) - 1 or (attn_type == 'A' and level == 0):
            top = min(topks[level], int(allowed[0, 0].sum()))
            pos = attn.masked_fill(~allowed, float('-inf')).topk(top, -1).indices
            selected = torch.zeros_like(allowed).scatter(-1, pos, True)
            parent_attn = attn
            if attn_type == 'A':
                attn = attn.masked_fill(selected, 0.)
        messages.append(attn @ v)
    return messages


@pytest.mark.parametrize('attn_type', ['A', 'B'])
@pytest.mark.parametrize('levels,topks,coarse', [(3, [3, 5, 4], (2, 3)), (1, [4], (3, 3)),
                                                  (4, [2, 3, 4, 2], (1, 2))])
def test_quadtree_attention_vs_dense_reference(attn_type, levels, topks, coarse):
    sizes = [(coarse[0] * 2**i, coarse[1] * 2**i) for i in range(levels)]

    def pyramid():
        return [torch.randn(2, h * w, 4, dtype=torch.float64, requires_grad=True)
                for h, w in sizes]
    qs, ks, vs = pyramid(), pyramid(), pyramid()
    ours = coarse_to_fine_attention(qs, ks, vs, sizes, topks, attn_type)
    ref = dense_quadtree_reference(qs, ks, vs, sizes, topks, attn_type)
    weights = [torch.randn_like(r) for r in ref]
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)
    grads = [torch.autograd.grad(sum((m * w).sum() for m, w in zip(out, weights)), qs + ks + vs)
             for out in (ours, ref)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('attn_type', ['A', 'B'])
def test_coarse_to_fine_attention_gradcheck(attn_type):
    sizes = [(1, 2), (2, 4), (4, 8)]
    inputs = [torch.randn(1, h * w, 2, dtype=torch.float64, requires_grad=True)
              for _ in range(3) for h, w in sizes]

    def fn(*flat):
        return tuple(coarse_to_fine_attention(flat[0:3], flat[3:6], flat[6:9], sizes,
                                              [1, 3, 2], attn_type))
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_full_topk_reduces_to_dense_attention():
    """Type B with every coarse key selected: the fine level attends to all keys."""
    sizes = [(2, 3), (4, 6)]
    qs, ks, vs = ([torch.randn(3, h * w, 8) for h, w in sizes] for _ in range(3))
    fine = coarse_to_fine_attention(qs, ks, vs, sizes, [6, 6], 'B')[1]
    torch.testing.assert_close(fine, F.scaled_dot_product_attention(qs[1], ks[1], vs[1]))


def test_bf16_weights_and_input():
    attn = QuadtreeAttention(16, 2, num_levels=2, topks=[2, 4]).to(torch.bfloat16)
    x = torch.randn(1, 32, 16, dtype=torch.bfloat16, requires_grad=True)
    out = attn(x, (4, 8))
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()

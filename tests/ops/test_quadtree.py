"""QuadTree attention's sparse operations (``vattn_mm/ops/quadtree.py``):
the gathered scores and aggregation against slow references, and the fast
path ``quadtree_chunks`` on or off."""
import functools

import pytest
import torch

from vattn_mm import ops
from vattn_mm.layers import QuadtreeAttention
from vattn_mm.ops import quadtree
from vattn_mm.ops.quadtree import gathered_aggregate, gathered_scores, top_keys

from .grads import assert_all_close, counted, weighted_grads


@pytest.mark.parametrize('chunk, fast', [(1 << 22, True), (40, True), (40, False)])
def test_sparse_ops_gradcheck_and_reference(chunk, fast, monkeypatch):
    """Both paths of ``quadtree_chunks`` against products with every key
    (float64, torch's default tolerance: 1e-7 relative), the chunked one also
    against gradcheck."""
    monkeypatch.setattr(quadtree, 'GATHER_CHUNK_ELEMENTS', chunk)   # 40: one row per chunk
    scores = functools.partial(gathered_scores, fast=fast)
    aggregate = functools.partial(gathered_aggregate, fast=fast)
    g, p, f, d, m, r, k = 2, 5, 4, 3, 6, 4, 3
    opts = dict(dtype=torch.float64, requires_grad=True)
    q, keys, values = torch.randn(g, p, f, d, **opts), torch.randn(g, m, r, d, **opts), \
        torch.randn(g, m, r, d, **opts)
    attn = torch.randn(g, p, f, k * r, **opts)
    index = torch.stack([torch.randperm(m)[:k] for _ in range(g * p)]).view(g, p, k)
    if fast:   # the plain path is autograd's own, compared with the references below
        assert torch.autograd.gradcheck(scores, (q, keys, index))
        assert torch.autograd.gradcheck(aggregate, (attn, values, index))
    # slow, obviously-correct versions: products with every key, then pick the
    # candidates (rows b * r .. b * r + r - 1 of the flattened blocks)
    rows = (index.unsqueeze(-1) * r + torch.arange(r)).flatten(-2)
    rows = rows.unsqueeze(2).expand(g, p, f, k * r)
    ref_scores = (q @ keys.reshape(g, 1, m * r, d).transpose(-1, -2)).gather(-1, rows)
    dense_attn = torch.zeros(g, p, f, m * r, dtype=torch.float64).scatter(-1, rows, attn)
    ref_agg = dense_attn @ values.reshape(g, 1, m * r, d)
    for ours, ref, inputs in ((scores(q, keys, index), ref_scores, (q, keys)),
                              (aggregate(attn, values, index), ref_agg, (attn, values))):
        torch.testing.assert_close(ours, ref)
        w = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad((ours * w).sum(), inputs),
                        torch.autograd.grad((ref * w).sum(), inputs)):
            torch.testing.assert_close(a, b)


def test_top_keys_paths_agree():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 40, 8, generator=g), torch.randn(3, 24, 8, generator=g)
    fast, plain = (top_keys(q, k, 5, fast=f).sort(-1).values for f in (True, False))
    assert torch.equal(fast, plain)


def test_quadtree_chunks_switch(monkeypatch):
    """``quadtree_chunks`` on (the CPU default, in chunks of a few rows) vs
    off: the same outputs and gradients of a 3-level layer (its core runs in
    float32: 1e-5)."""
    monkeypatch.setattr(quadtree, 'GATHER_CHUNK_ELEMENTS', 256)
    calls = counted(monkeypatch, quadtree.GatheredScores, 'apply')
    torch.manual_seed(0)
    attn = QuadtreeAttention(16, 2, num_levels=3, topks=[2, 3, 3])
    x = torch.randn(2, 16 * 12, 16, requires_grad=True)
    params = [x, *attn.parameters()]
    results = []
    for setting in ('default', {'quadtree_chunks': False}):
        ops.configure(attn, setting)
        calls.clear()
        results.append(weighted_grads(attn(x, (16, 12)), params))
        assert len(calls) == (2 if setting == 'default' else 0)
    assert_all_close(*results, 1e-5)

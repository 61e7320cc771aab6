"""Dilated local attention (``vattn_mm/ops/dilated_attention.py``): the
per-offset formulation, its own backward and DilateFormer's row bands, each
fast path against the plain path."""
import pytest
import torch

from vattn_mm import ops
from vattn_mm.layers import MultiScaleDilatedAttention
from vattn_mm.ops import dilated_attention as dilated
from vattn_mm.ops.dilated_attention import dilated_local_attention, dilated_local_attention_padded

from .grads import assert_all_close, counted, weighted_grads


def test_dilated_attention_borders_are_zero_padding_not_masking():
    """A position in a corner sees 5 of its 9 samples outside the 2x2 map:
    they take softmax mass with logit 0 and contribute value 0."""
    q = torch.ones(1, 2, 2, 1, 1)
    k = torch.zeros(1, 2, 2, 1, 1)
    v = torch.ones(1, 2, 2, 1, 1)
    for fast in (True, False):
        out = dilated_local_attention(q, k, v, kernel_size=3, dilation=1, scale=1., fast=fast)
        torch.testing.assert_close(out, torch.full_like(out, 4 / 9))
    for fn in (dilated_local_attention, dilated_local_attention_padded):
        with pytest.raises(ValueError, match='odd kernel_size'):
            fn(q, k, v, kernel_size=2, dilation=1, scale=1.)


@pytest.mark.parametrize('size, kernel, dilation', [((7, 9), 3, 2), ((3, 4), 3, 3), ((6, 5), 5, 1)])
def test_dilated_attention_gradients_are_autograds(size, kernel, dilation):
    """Its own backward against autograd through the export formulation
    (padded maps, no in-place writes) and through the plain path; (3, 4)
    with dilation 3 has offsets entirely outside the map.  float64, 1e-10."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, *size, 2, 3, generator=g, dtype=torch.double, requires_grad=True)
               for _ in range(3))
    out = dilated_local_attention(q, k, v, kernel, dilation, 0.7)
    assert type(out.grad_fn).__name__ == 'DilatedLocalAttentionBackward'
    ours = weighted_grads(out, [q, k, v])
    plain = dilated_local_attention(q, k, v, kernel, dilation, 0.7, fast=False)
    assert 'DilatedLocalAttention' not in type(plain.grad_fn).__name__
    assert_all_close(ours, weighted_grads(plain, [q, k, v]), 1e-10)
    padded = dilated_local_attention_padded(q, k, v, kernel, dilation, 0.7)
    assert_all_close(ours, weighted_grads(padded, [q, k, v]), 1e-10)


@pytest.fixture(scope='module')
def msda():
    torch.manual_seed(0)
    return MultiScaleDilatedAttention(12, num_heads=3, chunk_tokens=20).double()


def test_own_backward_switch(msda, monkeypatch):
    """``dilated_attention_backward`` on (the CPU default) vs off: the same
    outputs and gradients (float64, 1e-10)."""
    calls = counted(monkeypatch, dilated.DilatedLocalAttention, 'apply')
    x = torch.randn(2, 9 * 7, 12, dtype=torch.double, requires_grad=True)
    params = [x, *msda.parameters()]
    results = []
    for setting in ('default', {'dilated_attention_backward': False}):
        ops.configure(msda, setting)
        calls.clear()
        results.append(weighted_grads(msda(x, (9, 7)), params))
        assert len(calls) == (3 if setting == 'default' else 0)
    ops.configure(msda, 'default')
    assert_all_close(*results, 1e-10)


def test_bands_switch(msda, monkeypatch):
    """``dilated_bands`` on (the CPU default: a 9x7 map over bands of 20
    tokens, 2 rows, dilations 1-3 reaching across bands) vs off: the same
    outputs (float64, 1e-10)."""
    calls = counted(monkeypatch, msda, '_attend_group')
    x = torch.randn(2, 9 * 7, 12, dtype=torch.double)
    results = []
    with torch.no_grad():
        for setting in ('default', {'dilated_bands': False}):
            ops.configure(msda, setting)
            calls.clear()
            results.append([msda(x, (9, 7))])
            assert len(calls) == (3 * 5 if setting == 'default' else 3)
    ops.configure(msda, 'default')
    assert_all_close(*results, 1e-10)

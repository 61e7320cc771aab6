"""QuadTree-specific behaviour (the attention's sparse ops, padding, top-k,
dtypes); the contract every backbone follows is in test_backbones.py."""
import pytest
import torch
import torch.nn.functional as F

import vattn_mm.layers.quadtree_attention as qta
from vattn_mm.backbones import CheckpointMismatchError, QuadTree
from vattn_mm.backbones.quadtree import CLS_TOPKS
from vattn_mm.layers import QuadtreeAttention, coarse_to_fine_attention
from vattn_mm.layers.quadtree_attention import gathered_aggregate, gathered_scores

from .backbone_cases import CASES
from .golden import GOLDEN, case_paths, check_released_keys, load_case, official_arch
from .golden import write_released

MICRO = CASES['QuadTree'].micro
QUADTREE_CONVERTER = QuadTree.converter


def case(name):
    return load_case(GOLDEN / 'quadtree' / f'{name}.pt')


# ------------------------------------------------------------------ golden
def test_golden_cases_cover_both_types_and_settings():
    arches = {p.stem: load_case(p)['arch'] for p in case_paths('quadtree')}
    assert set(arches) == {'micro_A_det', 'micro_B_det', 'micro_B_clsfeatures'}
    assert arches['micro_B_clsfeatures']['topks'] == CLS_TOPKS
    assert arches['micro_B_clsfeatures']['value_branch_act'] == 'GELU'
    assert arches['micro_B_det']['value_branch_act'] == 'ReLU'


def test_type_a_key_list():
    """QuadTree-A (registered officially, never released; type-B key lists
    are checked with every family in test_backbones.py)."""
    with torch.device('meta'):
        model = QuadTree('b0', attn_type='A')
    check_released_keys('quadtree_A_b0', model, QUADTREE_CONVERTER)


def test_arch_zoo_is_the_released_set():
    assert sorted(QuadTree.arch_zoo) == ['b0', 'b1', 'b2', 'b3', 'b4']


# ------------------------------------------------------------ checkpoints
def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec_b = case('micro_B_clsfeatures')
    path = write_released(rec_b, tmp_path)
    model = QuadTree(dict(official_arch(rec_b), attn_type='A'),
                     init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='unexpected keys.*level_logits'):
        model.init_weights()
    model = QuadTree(dict(official_arch(rec_b), sr_ratios=[3, 3, 2, 1]),
                     init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='mis-shaped keys.*level_logits'):
        model.init_weights()
    rec_a = case('micro_A_det')
    model = QuadTree(dict(official_arch(rec_a), attn_type='B'),
                     init_cfg=dict(type='Pretrained', checkpoint=write_released(rec_a, tmp_path)))
    with pytest.raises(CheckpointMismatchError, match='missing keys.*lepe_convs'):
        model.init_weights()


def test_official_key_names():
    official = QUADTREE_CONVERTER.ours_to_official(QuadTree(MICRO).state_dict())
    assert 'block1.0.attn.py_att.get_vs.3.weight' in official
    assert 'block1.0.attn.value_branchs.2.5.weight' in official


# --------------------------------------------------------- construction
def test_dense_defaults_and_overrides():
    model = QuadTree('b0')
    attn = model.stages[0].blocks[0].attn
    assert attn.topks == [32, 32, 32, 32] and attn.attn_type == 'B'
    assert isinstance(attn.value_downsamples[0][1], torch.nn.ReLU)
    assert [s.blocks[0].attn.num_levels for s in model.stages] == [4, 3, 2, 1]
    model = QuadTree('b0', topks=CLS_TOPKS, value_branch_act='GELU')
    attn = model.stages[0].blocks[0].attn
    assert attn.topks == [8, 8, 8, 8] and isinstance(attn.value_downsamples[0][4], torch.nn.GELU)
    attn = QuadTree('b0', attn_type='A').stages[0].blocks[0].attn
    assert attn.attn_type == 'A' and not hasattr(attn, 'level_logits')


def test_bad_quadtree_args():
    with pytest.raises(ValueError, match="attn_type must be 'A' or 'B'"):
        QuadTree('b0', attn_type='C')
    with pytest.raises(ValueError, match='fewer entries than the 4 quadtree levels'):
        QuadTree('b0', topks=[8, 8])


# ------------------------------------------------------------ input sizes
@pytest.mark.parametrize('size', [(64, 64), (100, 150), (33, 47), (32, 200)])
def test_any_input_size(size):
    model = QuadTree(MICRO).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    for i, o in enumerate(outs):
        stride = 4 * 2**i
        assert o.shape[2:] == (-(-size[0] // stride), -(-size[1] // stride))


def test_batch_elements_independent():
    model = QuadTree(MICRO).eval()
    x = torch.randn(3, 3, 64, 96)
    with torch.no_grad():
        batched, single = model(x), model(x[1:2])
    for o, r in zip(batched, single):
        torch.testing.assert_close(o[1:2], r, rtol=1e-5, atol=1e-5)


def test_padding_equals_padded_image_cropped():
    """A non-divisible input = the zero-padded image (what mmdet's
    pad_size_divisor=32 does) with the features cropped to the image."""
    model = QuadTree(MICRO).eval()
    x = torch.randn(1, 3, 100, 150)
    with torch.no_grad():
        outs = model(x)
        padded = model(F.pad(x, (0, 10, 0, 28)))
    for i, (o, p) in enumerate(zip(outs, padded)):
        assert p.shape[2:] == (128 // 4 // 2**i, 160 // 4 // 2**i)
        torch.testing.assert_close(o, p[..., :o.shape[2], :o.shape[3]])


def test_attention_layer_rejects_non_divisible_map():
    attn = QuadtreeAttention(16, 2, num_levels=3)
    with pytest.raises(ValueError, match='divisible by 4, got 6x10'):
        attn(torch.randn(1, 60, 16), (6, 10))


def test_topk_clamped_and_logged_once(monkeypatch):
    logged = []
    monkeypatch.setattr(qta, '_TOPK_CLAMP_LOGGED', False)
    monkeypatch.setattr(qta, 'print_log', lambda msg, **kw: logged.append(msg))
    model = QuadTree(MICRO, topks=[32, 32, 32, 32]).eval()
    with torch.no_grad():
        for _ in range(2):
            outs = model(torch.randn(1, 3, 64, 96))   # coarsest levels: 2x3 tokens
    assert len(outs) == 4 and all(torch.isfinite(o).all() for o in outs)
    assert len(logged) == 1
    assert 'top-k 32' in logged[0] and 'exceeds the 6 candidate keys' in logged[0]


# ------------------------------------------------- kernels vs references
@pytest.mark.parametrize('chunk', [1 << 22, 40])
def test_sparse_ops_gradcheck_and_reference(chunk, monkeypatch):
    monkeypatch.setattr(qta, 'GATHER_CHUNK_ELEMENTS', chunk)   # 40: one row per chunk
    g, p, f, d, m, r, k = 2, 5, 4, 3, 6, 4, 3
    opts = dict(dtype=torch.float64, requires_grad=True)
    q, keys, values = torch.randn(g, p, f, d, **opts), torch.randn(g, m, r, d, **opts), \
        torch.randn(g, m, r, d, **opts)
    attn = torch.randn(g, p, f, k * r, **opts)
    index = torch.stack([torch.randperm(m)[:k] for _ in range(g * p)]).view(g, p, k)
    assert torch.autograd.gradcheck(gathered_scores, (q, keys, index))
    assert torch.autograd.gradcheck(gathered_aggregate, (attn, values, index))
    # slow, obviously-correct versions: products with every key, then pick the
    # candidates (rows b * r .. b * r + r - 1 of the flattened blocks)
    rows = (index.unsqueeze(-1) * r + torch.arange(r)).flatten(-2)
    rows = rows.unsqueeze(2).expand(g, p, f, k * r)
    ref_scores = (q @ keys.reshape(g, 1, m * r, d).transpose(-1, -2)).gather(-1, rows)
    dense_attn = torch.zeros(g, p, f, m * r, dtype=torch.float64).scatter(-1, rows, attn)
    ref_agg = dense_attn @ values.reshape(g, 1, m * r, d)
    for ours, ref, inputs in ((gathered_scores(q, keys, index), ref_scores, (q, keys)),
                              (gathered_aggregate(attn, values, index), ref_agg, (attn, values))):
        torch.testing.assert_close(ours, ref)
        w = torch.randn_like(ref)
        for a, b in zip(torch.autograd.grad((ours * w).sum(), inputs),
                        torch.autograd.grad((ref * w).sum(), inputs)):
            torch.testing.assert_close(a, b)


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


# ------------------------------------------------------------ precision
def test_autocast_bf16_cpu_forward_backward():
    torch.manual_seed(0)
    model = QuadTree(MICRO, topks=[4, 8, 8, 8], drop_path_rate=0.)
    model.init_weights()
    model.train()
    x = torch.randn(2, 3, 64, 64)
    ref = model(x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
        loss = sum(o.float().square().mean() for o in outs)
    loss.backward()
    for o, r in zip(outs, ref):
        assert o.shape == r.shape and torch.isfinite(o).all()
        assert (o.float() - r).abs().mean() < 0.05 * r.abs().mean()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.stages[0].blocks[0].attn.level_logits.grad.abs().sum() > 0


def test_bf16_weights_and_input():
    attn = QuadtreeAttention(16, 2, num_levels=2, topks=[2, 4]).to(torch.bfloat16)
    x = torch.randn(1, 32, 16, dtype=torch.bfloat16, requires_grad=True)
    out = attn(x, (4, 8))
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and torch.isfinite(x.grad.float()).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_matches_cpu():
    rec = case('micro_B_det')
    model = QuadTree(official_arch(rec), drop_path_rate=0.).eval()
    model.load_state_dict(QUADTREE_CONVERTER.official_to_ours(rec['checkpoint']))
    with torch.no_grad():
        cpu = model(rec['input'])
        gpu = model.cuda()(rec['input'].cuda())
        with torch.autocast('cuda', dtype=torch.float16):
            half = model(rec['input'].cuda())
    for c, g, h in zip(cpu, gpu, half):
        torch.testing.assert_close(g.cpu(), c, rtol=1e-4, atol=1e-4)
        assert torch.isfinite(h).all()


def test_thread_count_moves_quadtree_only_through_its_selections():
    """tools/analysis/quadtree_exactness.py: 1 vs 2 threads; pinned to the
    same top-k selections the two runs agree to rounding, so any larger
    difference is selections flipping (QuadTree-b0 at 512x512: 18 of 18432
    rows, 1.8e-3, on the development machine)."""
    import torch

    from .tools import load_tool
    threads = torch.get_num_threads()
    r = load_tool('analysis/quadtree_exactness.py').thread_sensitivity('QuadTree:b0', (512, 512))
    assert torch.get_num_threads() == threads
    assert r['rows'] == 18432
    assert r['pinned_deviation'] < 1e-5
    if r['flipped_rows'] == 0:
        assert r['deviation'] < 1e-5

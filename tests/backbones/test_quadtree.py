"""QuadTree-specific behaviour (padding, top-k, dtypes; the attention in
tests/layers/test_quadtree_attention.py, its sparse operations in
tests/ops/test_quadtree.py); the contract every backbone follows is in
test_backbones.py."""
import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import CheckpointMismatchError, QuadTree
from vattn_mm.backbones.quadtree import CLS_TOPKS

from ..backbone_cases import CASES
from ..golden import GOLDEN, case_paths, check_released_keys, load_fixture, official_arch
from ..golden import write_released

MICRO = CASES['QuadTree'].micro
QUADTREE_CONVERTER = QuadTree.converter


def case(name):
    return load_fixture(GOLDEN / 'quadtree' / f'{name}.pt')


# ------------------------------------------------------------------ golden
def test_golden_cases_cover_both_types_and_settings():
    arches = {p.stem: load_fixture(p)['arch'] for p in case_paths('quadtree')}
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
    """.dev_scripts/op_benchmarks/quadtree_exactness.py: 1 vs 2 threads; pinned to the
    same top-k selections the two runs agree to rounding, so any larger
    difference is selections flipping (QuadTree-b0 at 512x512: 18 of 18432
    rows, 1.8e-3, on the development machine)."""
    import torch

    from ..tools import DEV_SCRIPTS, load_tool
    threads = torch.get_num_threads()
    r = load_tool('op_benchmarks/quadtree_exactness.py', DEV_SCRIPTS).thread_sensitivity('QuadTree:b0', (512, 512))
    assert torch.get_num_threads() == threads
    assert r['rows'] == 18432
    assert r['pinned_deviation'] < 1e-5
    if r['flipped_rows'] == 0:
        assert r['deviation'] < 1e-5

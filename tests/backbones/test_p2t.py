"""P2T-specific behaviour; the contract every backbone follows is in
test_backbones.py."""
import pytest
import torch

from vattn_mm.backbones import CheckpointMismatchError, P2T
from vattn_mm.layers import PyramidPoolingAttention, make_pool_convs, pooled_size

from ..backbone_cases import CASES
from ..golden import case_paths, check_released_keys, load_fixture, official_arch, read_key_list
from ..golden import write_released

MICRO = CASES['P2T'].micro
CONVERTER = P2T.converter


def test_pool_convs_are_stored_once_per_stage(tmp_path):
    rec = load_fixture(case_paths('p2t')[0])
    model = P2T(arch=official_arch(rec), init_cfg=dict(
        type='Pretrained', checkpoint=write_released(rec, tmp_path)))
    model.init_weights()
    keys = model.state_dict().keys()
    assert sum('pool_convs' in k for k in keys) == 2 * 4 * 4
    assert not any('blocks' in k and 'pool_convs' in k for k in keys)
    # the official 4-D 1x1-conv FFN weights land in our linear layers
    fc1 = rec['checkpoint']['block1.0.mlp.fc1.weight']
    assert fc1.dim() == 4
    assert torch.equal(model.state_dict()['stages.0.blocks.0.ffn.fc1.weight'], fc1[:, :, 0, 0])


def test_golden_cases_present():
    assert {p.stem for p in case_paths('p2t')} >= {
        'micro_a', 'micro_b', 'micro_anysize_clsfpn_100x150'}


@pytest.mark.parametrize('arch', sorted(P2T.arch_zoo))
def test_released_parameter_counts(arch):
    with torch.device('meta'):
        model = P2T(arch)
    check_released_keys(f'p2t_{arch}', model, CONVERTER)
    header, _ = read_key_list(f'p2t_{arch}')
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == int(header['total_params']) - int(header['head_params'])


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = load_fixture(case_paths('p2t')[0])
    path = write_released(rec, tmp_path)
    wrong_ratios = [[12, 16, 20], [6, 8, 10], [3, 4, 5], [1, 2, 3]]  # 3 pool convs / stage
    model = P2T(dict(official_arch(rec), pool_ratios=wrong_ratios),
                init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match=r'unexpected keys.*pool_convs\.3'):
        model.init_weights()
    model = P2T(dict(official_arch(rec), mlp_ratios=[4, 4, 4, 4]),
                init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match=r'mis-shaped keys.*ffn\.fc1\.weight'):
        model.init_weights()
    model = P2T('tiny', init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='missing keys'):
        model.init_weights()


def test_official_key_names():
    official = CONVERTER.ours_to_official(P2T(MICRO).state_dict())
    assert 'd_convs4.3.weight' in official and 'block2.1.attn.kv.0.bias' in official
    assert 'block1.0.mlp.conv.weight' in official


def test_bad_pool_ratios_and_heads():
    with pytest.raises(ValueError, match="arch\\['pool_ratios'\\] has 3 entries"):
        P2T(dict(MICRO, pool_ratios=[[8], [4], [2]]))
    with pytest.raises(ValueError, match='not divisible by num_heads'):
        P2T(dict(MICRO, num_heads=[3, 2, 3, 4]))
    with pytest.raises(ValueError, match='positive'):
        P2T(dict(MICRO, pool_ratios=[[8, 0], [4], [2], [1]]))
    # official constructor keys without effect are accepted
    P2T(dict(MICRO, patch_size=4, img_size=224, num_classes=10, drop_rate=0.))


def test_pooled_size_rounding_and_minimum():
    # banker's rounding as Python's round(): 2.5 -> 2, 3.5 -> 4; never 0
    assert pooled_size((5, 7), 2) == (2, 4)
    assert pooled_size((32, 40), 12) == (3, 3)
    assert pooled_size((2, 2), 4) == (1, 1)       # official: round(0.5) = 0 -> crash
    assert pooled_size((1, 1), 24) == (1, 1)


@pytest.mark.parametrize('size', [(128, 160), (100, 150), (33, 47), (64, 64), (16, 16), (1, 1)])
def test_any_input_size(size):
    model = P2T(MICRO).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    h, w = size
    for i, o in enumerate(outs):
        h, w = ((h + 3) // 4, (w + 3) // 4) if i == 0 else ((h + 1) // 2, (w + 1) // 2)
        assert o.shape == (1, MICRO['embed_dims'][i], h, w)
        assert torch.isfinite(o).all()


def test_attention_matches_explicit_softmax():
    torch.manual_seed(0)
    attn = PyramidPoolingAttention(12, 3, (2, 3)).eval()
    convs = make_pool_convs(12, 2)
    hw = (5, 7)
    x = torch.randn(2, 35, 12)
    # reference: literal official formulation
    maps = x.transpose(1, 2).reshape(2, 12, *hw)
    pools = []
    for r, conv in zip((2, 3), convs):
        p = torch.nn.functional.adaptive_avg_pool2d(maps, (round(hw[0] / r), round(hw[1] / r)))
        pools.append((p + conv(p)).flatten(2))
    kv = attn.kv(attn.norm(torch.cat(pools, 2).transpose(1, 2)))
    kv = kv.reshape(2, -1, 2, 3, 4).permute(2, 0, 3, 1, 4)
    q = attn.q(x).reshape(2, 35, 3, 4).transpose(1, 2)
    a = (q @ kv[0].transpose(-2, -1) * 4 ** -0.5).softmax(-1)
    ref = attn.proj((a @ kv[1]).transpose(1, 2).reshape(2, 35, 12))
    torch.testing.assert_close(attn(x, hw, convs), ref)
    with pytest.raises(ValueError, match='1 pooling convs for 2 pool ratios'):
        attn(x, hw, convs[:1])


def test_frozen_stages_and_norm_eval():
    model = P2T(MICRO, frozen_stages=2, norm_eval=True)
    model.train()
    frozen, live = list(model.stages[:2]), list(model.stages[2:])
    assert not any(p.requires_grad for s in frozen for p in s.parameters())
    assert not any(m.training for s in frozen for m in s.modules())
    assert all(p.requires_grad for s in live for p in s.parameters())
    assert all(m.training for s in live for m in s.modules())
    outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape[1] for o in outs] == MICRO['embed_dims']
    sum(o.sum() for o in outs).backward()
    assert model.stages[2].pool_convs[0].weight.grad is not None
    assert model.stages[1].pool_convs[0].weight.grad is None


def test_drop_path_schedule():
    model = P2T(MICRO, drop_path_rate=0.4)
    rates = [getattr(b.drop_path, 'drop_prob', 0.) for s in model.stages for b in s.blocks]
    assert rates == pytest.approx([0., 0.1, 0.2, 0.3, 0.4])

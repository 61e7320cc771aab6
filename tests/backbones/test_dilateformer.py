import argparse

"""DilateFormer-specific behaviour (CPE, sizes, training checkpoints; MSDA in
tests/layers/test_dilated_attention.py); the contract every backbone follows
is in test_backbones.py."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vattn_mm.backbones import CheckpointMismatchError, DilateFormer

from ..backbone_cases import CASES
from ..golden import assert_outputs_match, case_paths, load_fixture, official_arch, write_released

MICRO = CASES['DilateFormer'].micro
DILATEFORMER_CONVERTER = DilateFormer.converter


def build_from_case(rec, ckpt, **kwargs):
    return DilateFormer(arch=official_arch(rec), drop_path_rate=0.,
                        init_cfg=dict(type='Pretrained', checkpoint=ckpt), **kwargs)


# ------------------------------------------------------------------ golden
def test_golden_cases_present():
    assert {p.stem for p in case_paths('dilateformer')} == {
        'micro_b', 'micro_t', 'micro_t_odd100x150'}


def test_deit_style_training_checkpoint(tmp_path):
    """A DeiT-style file ({'model', 'model_ema', 'optimizer', ..., 'args':
    argparse.Namespace}) loads with weights_only and uses 'model'."""
    rec = load_fixture(case_paths('dilateformer')[1])
    sd = rec['checkpoint']
    path = tmp_path / 'checkpoint.pth'
    torch.save({'model': sd, 'model_ema': {k: v + 1 for k, v in sd.items()},
                'optimizer': {'state': {}, 'param_groups': [{'lr': 1e-3, 'params': [0]}]},
                'epoch': 299, 'max_accuracy': 81.2,
                'args': argparse.Namespace(model='dilateformer_tiny', drop_path=0.1)}, path)
    model = build_from_case(rec, str(path)).eval()
    model.init_weights()
    with torch.no_grad():
        assert_outputs_match(model(rec['input']), rec['outputs'])


def test_dense_out_norms_are_dense_only(tmp_path):
    rec = load_fixture(case_paths('dilateformer')[1])
    model = build_from_case(rec, write_released(rec, tmp_path),
                            out_norm_cfg=dict(type='LN', eps=1e-6)).eval()
    model.init_weights()       # strict: the norms are reported dense-only, not missing
    with torch.no_grad():
        outs = model(rec['input'])
    for out, ref, stage in zip(outs, rec['outputs'], model.stages):
        assert torch.equal(stage.norm.weight, torch.ones_like(stage.norm.weight))
        expected = F.layer_norm(ref.permute(0, 2, 3, 1), ref.shape[1:2], eps=1e-6)
        torch.testing.assert_close(out, expected.permute(0, 3, 1, 2), rtol=1e-4, atol=1e-4)


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = load_fixture(case_paths('dilateformer')[1])      # micro_t
    path = write_released(rec, tmp_path)
    arch = dict(official_arch(rec), dilate_attention=[True, False, False, False])
    model = DilateFormer(arch, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError,
                       match=r'mis-shaped keys.*stages\.1\.blocks\.0\.attn\.qkv\.weight'):
        model.init_weights()
    model = DilateFormer(dict(official_arch(rec), depths=[1, 2, 2, 1]),
                         init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match=r'missing keys.*stages\.2\.blocks\.1\.'):
        model.init_weights()


def test_official_key_names():
    official = DILATEFORMER_CONVERTER.ours_to_official(
        DilateFormer(MICRO, out_norm_cfg=dict(type='LN', eps=1e-6)).state_dict())
    assert 'patch_embed.proj.9.weight' in official
    assert 'stages.0.downsample.proj.1.running_var' in official
    assert 'stages.2.downsample.proj.0.bias' in official
    variant = DilateFormer(dict(MICRO, cpe_per_satge=True, merging_way='conv2_2'))
    official = DILATEFORMER_CONVERTER.ours_to_official(variant.state_dict())
    assert official['stages.0.downsample.pos_embed.weight'].shape == (24, 1, 3, 3)
    assert official['stages.1.downsample.proj.0.weight'].shape == (48, 24, 2, 2)


# ------------------------------------------------------------ contract
def test_arch_zoo_sizes():
    with torch.device('meta'):
        numel = {a: sum(p.numel() for p in DilateFormer(a).parameters())
                 for a in DilateFormer.arch_zoo}
    # released totals minus the classifier (head + final norm)
    assert numel == {'tiny': 17238744 - 577000 - 2 * 576,
                     'small': 24057504 - 577000 - 2 * 576,
                     'base': 47432376 - 769000 - 2 * 768}


def test_bad_arch_and_args():
    with pytest.raises(ValueError, match='heads by the 3 dilations'):
        DilateFormer(dict(MICRO, num_heads=[2, 6, 4, 8]))
    with pytest.raises(ValueError, match='kernel_size must be odd'):
        DilateFormer(dict(MICRO, kernel_size=4))
    with pytest.raises(ValueError, match='downsampling after every stage'):
        DilateFormer(dict(MICRO, downsamples=[True, False, True, False]))
    with pytest.raises(ValueError, match='patch_way'):
        DilateFormer(dict(MICRO, patch_way='pointconv'))
    with pytest.raises(ValueError, match=r"arch\['num_heads'\] has 3 entries"):
        DilateFormer(dict(MICRO, num_heads=[3, 6, 4]))


@pytest.mark.parametrize('size', [(64, 64), (100, 150), (33, 47), (5, 3)])
def test_any_input_size(size):
    model = DilateFormer(MICRO, out_indices=(0, 1, 2, 3)).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    h, w = size
    for i, o in enumerate(outs):
        for _ in range(2 if i == 0 else 1):
            h, w = (h + 1) // 2, (w + 1) // 2
        assert o.shape == (1, 12 * 2 ** i, h, w)


def test_out_indices_frozen_stages_norm_eval():
    model = DilateFormer(MICRO, out_indices=(1, 3), frozen_stages=2, norm_eval=True)
    model.train()
    assert not any(p.requires_grad for p in model.stages[:2].parameters())
    assert all(p.requires_grad for p in model.stages[2:].parameters())
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 6 and not any(m.training for m in bns)
    outs = model(torch.randn(2, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == [(2, 24, 8, 8), (2, 96, 2, 2)]


def test_gradients_reach_every_parameter_and_the_input():
    model = DilateFormer(MICRO, out_norm_cfg=dict(type='LN'))
    model.init_weights()
    model.train()
    x = torch.randn(2, 3, 37, 53, requires_grad=True)
    sum(o.square().mean() for o in model(x)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad.abs().sum() > 0

"""EfficientViT (MIT, B series): the stem map against the official ``stage0``,
the released checkpoint forms, the key layout both ways, LiteMLA's quadratic
small-map branch inside the backbone, gradients, bf16 autocast, token layout
and arch errors.  The shared contract (golden outputs, key lists, with_cp,
freezing, odd sizes) is in test_backbones.py."""
import pytest
import torch

import vattn_mm.layers.lite_mla as lite_mla
from vattn_mm.backbones import CheckpointMismatchError, EfficientViT, backbone_class

from ..backbone_cases import CASES
from ..golden import (GOLDEN, assert_outputs_match, case_paths, load_fixture, official_arch,
                     read_key_list)

FIXTURES = case_paths('efficientvit')
MICRO = CASES['EfficientViT'].micro


def pretrained(rec: dict, path) -> EfficientViT:
    model = EfficientViT(official_arch(rec), init_cfg=dict(type='Pretrained',
                                                           checkpoint=str(path)))
    model.init_weights()
    return model.eval()


@pytest.mark.parametrize('path', FIXTURES, ids=lambda p: p.stem)
def test_stem_is_the_official_stage0(path, tmp_path):
    rec = load_fixture(path)
    torch.save({'state_dict': rec['checkpoint']}, tmp_path / 'ck.pth')
    model = pretrained(rec, tmp_path / 'ck.pth')
    with torch.no_grad():
        stem = model.forward_stem(rec['input'])
    assert_outputs_match([stem], [rec['extra_outputs']['stage0']])
    assert model.strides == [4, 8, 16, 32]
    assert model.out_channels == rec['arch']['width_list'][1:]


def test_released_forms_load(tmp_path):
    """The raw classification state dict (``backbone.*`` + ``head.*``), the
    released ``{'state_dict': ...}`` file and a backbone-only state dict
    without the prefix give the same weights; a foreign key is named."""
    rec = load_fixture(FIXTURES[0])
    sd = rec['checkpoint']
    bare = {k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')}
    forms = {'raw': sd, 'wrapped': {'state_dict': sd}, 'bare': {'state_dict': bare}}
    outs = []
    for name, obj in forms.items():
        torch.save(obj, tmp_path / f'{name}.pth')
        with torch.no_grad():
            outs.append(pretrained(rec, tmp_path / f'{name}.pth')(rec['input']))
    for out in outs:
        assert_outputs_match(out, rec['outputs'])
    report = EfficientViT.converter.match(dict(sd), EfficientViT(official_arch(rec)).state_dict())[1]
    assert report.ok and sorted(report.dropped) == sorted(k for k in sd if k.startswith('head.'))
    torch.save({**bare, 'extra.weight': torch.zeros(1)}, tmp_path / 'foreign.pth')
    with pytest.raises(CheckpointMismatchError, match=r'unexpected keys \(1\): extra.weight'):
        pretrained(rec, tmp_path / 'foreign.pth')


@pytest.mark.parametrize('arch', sorted(EfficientViT.arch_zoo))
def test_official_keys_both_ways(arch):
    """Every released backbone key maps to ours and back to itself (with the
    ``backbone.`` prefix); ``head.*`` is classification-only."""
    _, official = read_key_list(f'efficientvit_{arch}')
    converter = EfficientViT.converter
    ours = converter.official_to_ours(official)
    with torch.device('meta'):
        model = EfficientViT(arch)
    assert ours.keys() == model.state_dict().keys()
    assert set(converter.ours_to_official(ours)) == {k for k in official
                                                    if not k.startswith('head.')}


def test_quadratic_branch_inside_the_backbone(monkeypatch):
    """A small input gives late maps of <= ``dim`` tokens: LiteMLA takes the
    quadratic form there (as the official module) with the linear form's values."""
    model = EfficientViT(MICRO).eval()
    x = torch.randn(1, 3, 40, 56)       # stage 3: 3x4 = 12 <= 16 tokens, stage 4: 2x2
    calls = []
    quadratic = lite_mla.relu_quadratic_attention
    monkeypatch.setattr(lite_mla, 'relu_quadratic_attention',
                        lambda *a: calls.append(a[0].shape[2]) or quadratic(*a))
    with torch.no_grad():
        outs = model(x)
        assert sorted(set(calls)) == [4, 12]
        monkeypatch.setattr(lite_mla.LiteMLA, 'is_linear', lambda self, n: True)
        linear = model(x)
    assert [o.shape[2:] for o in outs] == [(10, 14), (5, 7), (3, 4), (2, 2)]
    for a, b in zip(outs, linear):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = EfficientViT(MICRO, drop_path_rate=0.1)
    model.init_weights()
    model.train()
    x = torch.randn(2, 3, 64, 80, requires_grad=True)
    sum(o.square().mean() for o in model(x)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_bf16_autocast_on_cpu():
    torch.manual_seed(0)
    model = EfficientViT(MICRO).eval()
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        ref = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            outs = model(x)
    for out, r in zip(outs, ref):
        assert out.shape == r.shape and torch.isfinite(out).all()
        assert (out.float() - r).abs().max() <= 0.1 * r.abs().max()


def test_blocks_keep_contiguous_tokens():
    """Blocks run on (B, N, C) tokens whose map views are channels-last, and
    return contiguous tokens: no layout copies between them."""
    model = EfficientViT(MICRO).eval()
    outs = []
    for stage in model.stages:
        for block in stage.blocks:
            block.register_forward_hook(lambda m, a, out: outs.append(out))
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    assert outs and all(o.dim() == 3 and o.is_contiguous() for o in outs)


@pytest.mark.parametrize('change,message', [
    (dict(width_list=[8, 16, 24, 32]), 'need 5 entries'),
    (dict(depth_list=[1, 0, 1, 1, 1]), 'stages 1-2 need at least'),
    (dict(norm='ln2d'), "norm 'ln2d' is not supported"),
    (dict(act_func='swish'), "act_func 'swish' is not one of"),
])
def test_bad_arch_is_named(change, message):
    with pytest.raises(ValueError, match=message):
        EfficientViT({**MICRO, **change})


def test_imagenet_neck_needs_head_widths():
    assert EfficientViT('b1').imagenet_neck()['widths'] == [1536, 1600]
    with pytest.raises(ValueError, match='no head_width_list'):
        EfficientViT(MICRO).imagenet_neck()
    assert backbone_class('efficientvit') is EfficientViT
    assert (GOLDEN / 'keys' / 'efficientvit_b3.txt').is_file()

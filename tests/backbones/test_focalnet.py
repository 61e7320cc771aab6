"""FocalNet-specific behaviour (focal kernels and their padding, arches,
post-norm blocks); the contract every backbone follows is in test_backbones.py."""
import logging

import pytest
import torch
from mmengine.logging import MMLogger

from vattn_mm.backbones import CheckpointMismatchError, FocalNet, load_pretrained

from ..backbone_cases import CASES
from ..golden import case_paths, load_fixture, official_arch, read_key_list, write_released

FOCALNET_CONVERTER = FocalNet.converter
#: the fixture entry that is a constructor argument, not an arch key
CASE_EXTRAS = ('out_indices', )
MICRO = CASES['FocalNet'].micro


def build_from_case(rec, ckpt, **arch_changes):
    arch = dict(official_arch(rec, drop=CASE_EXTRAS), **arch_changes)
    return FocalNet(arch, drop_path_rate=0., init_cfg=dict(type='Pretrained', checkpoint=ckpt))


def case(name):
    return next(p for p in case_paths('focalnet') if p.stem == name)


@pytest.mark.parametrize('path', case_paths('focalnet'), ids=lambda p: p.stem)
def test_classification_windows_give_same_features(path, tmp_path):
    """The zero-padded kernels compute exactly what the ImageNet kernels do:
    a model with the classification focal windows (no conversion) returns the
    golden outputs of the det model with its larger windows, i.e.
    LayerNorm(classification stage features)."""
    rec = load_fixture(path)
    ckpt = write_released(rec, tmp_path)
    model = build_from_case(rec, ckpt, focal_windows=rec['arch']['cls_focal_windows'])
    model.init_weights()
    model.eval()
    with torch.no_grad():
        outs = model(rec['input'])
    for out, ref in zip(outs, rec['outputs']):
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_kernel_zero_padding_and_log_note(tmp_path):
    rec = load_fixture(case('micro_srf'))
    ckpt = write_released(rec, tmp_path)
    model = build_from_case(rec, ckpt)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        model.init_weights()
    finally:
        logger.removeHandler(handler)
    note = [r.getMessage() for r in records if 'zero-padded' in r.getMessage()]
    assert note and 'zero-padded 10 pretrained focal kernels' in note[0]
    assert '3x3->9x9' in note[0] and '5x5->11x11' in note[0]
    loaded = model.stages[1].blocks[0].attn.focal_layers[1].weight
    source = rec['checkpoint']['layers.1.blocks.0.modulation.focal_layers.1.0.weight']
    assert loaded.shape == (32, 1, 11, 11) and source.shape == (32, 1, 5, 5)
    assert torch.equal(loaded[:, :, 3:8, 3:8], source)
    border = loaded.clone()
    border[:, :, 3:8, 3:8] = 0
    assert not border.any()
    report = load_pretrained(build_from_case(rec, ckpt), ckpt, FOCALNET_CONVERTER)
    assert report.ok and len(report.notes) == 1


def test_larger_checkpoint_kernel_is_a_mismatch(tmp_path):
    """A checkpoint kernel larger than the model's is never cropped."""
    rec = load_fixture(case('micro_srf'))
    model = build_from_case(rec, write_released(rec, tmp_path))
    model.init_weights()
    torch.save({'state_dict': model.state_dict()}, tmp_path / 'det9.pth')
    small = build_from_case(rec, str(tmp_path / 'det9.pth'), focal_windows=[3, 3, 3, 3])
    with pytest.raises(CheckpointMismatchError,
                       match=r'mis-shaped keys \(10\).*attn\.focal_layers\.0\.weight '
                             r'\(checkpoint \(16, 1, 9, 9\) vs model \(16, 1, 3, 3\)\)'):
        small.init_weights()


@pytest.mark.parametrize('arch', sorted(FocalNet.arch_zoo))
def test_arch_matches_release(arch):
    """Stage widths, kernels and block type follow the released model."""
    header, sd = read_key_list(f'focalnet_{arch}')
    with torch.device('meta'):
        model = FocalNet(arch)
    assert model.stages[0].patch_embed.proj.weight.shape == sd['patch_embed.proj.weight'].shape
    big = arch.split('_')[0] in ('large', 'xlarge', 'huge')
    assert model.stages[2].blocks[0].post_norm == big
    if big:  # the dense L/XL/H keep the ImageNet kernels (FocalNet-DINO)
        mod = model.stages[2].blocks[0].attn
        official = [v.shape[-1] for k, v in sd.items()
                    if k.startswith('layers.2.blocks.0.modulation.focal_layers.')]
        assert mod.kernel_sizes == official
        assert model.stages[0].patch_embed.proj.padding == (2, 2)


@pytest.mark.parametrize('name', ['tiny_iso', 'small_iso', 'base_iso'])
def test_isotropic_models_are_rejected(name, tmp_path):
    with pytest.raises(ValueError, match='isotropic'):
        FocalNet(name)
    _, sd = read_key_list(f'focalnet_{name}')
    with torch.device('meta'):
        model = FocalNet('tiny_srf')
    _, report = FOCALNET_CONVERTER.match(sd, model.state_dict())
    assert not report.ok
    with pytest.raises(ValueError, match='single stage'):
        FocalNet(dict(embed_dim=192, depths=[12], focal_levels=[3], focal_windows=[3]))


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = load_fixture(case('micro_lrf_layerscale'))
    path = write_released(rec, tmp_path)
    model = build_from_case(rec, path, use_layerscale=False)
    with pytest.raises(CheckpointMismatchError, match=r'unexpected keys.*ls1\.weight'):
        model.init_weights()
    model = build_from_case(rec, path, focal_levels=[2, 2, 2, 2])
    with pytest.raises(CheckpointMismatchError, match=r'mis-shaped keys.*attn\.f\.weight'):
        model.init_weights()
    model = build_from_case(rec, path, depths=[2, 1, 2, 1])
    with pytest.raises(CheckpointMismatchError, match=r'missing keys.*stages\.2\.blocks\.1\.'):
        model.init_weights()


def test_ours_roundtrip_dense_checkpoint_and_detector_prefix(tmp_path):
    model = FocalNet(dict(MICRO, use_layerscale=True, use_conv_embed=True))
    model.init_weights()
    official = FOCALNET_CONVERTER.ours_to_official(model.state_dict())
    assert {'norm0.weight', 'norm3.bias', 'layers.0.downsample.proj.weight',
            'layers.0.blocks.0.gamma_1',
            'layers.2.blocks.1.modulation.focal_layers.1.0.weight'} <= official.keys()
    assert FOCALNET_CONVERTER.official_to_ours(official).keys() == model.state_dict().keys()
    # an official dense (mmdet) checkpoint: its norm0..norm3 load too
    torch.save({'state_dict': {'backbone.' + k: v for k, v in official.items()}, 'meta': {}},
               tmp_path / 'det.pth')
    clone = FocalNet(model.arch)
    report = load_pretrained(clone, str(tmp_path / 'det.pth'), FOCALNET_CONVERTER)
    assert report.ok and not report.dense_only
    x = torch.randn(1, 3, 64, 64)
    model.eval(), clone.eval()
    for a, b in zip(model(x), clone(x)):
        assert torch.equal(a, b)


def test_bad_arch_and_args():
    with pytest.raises(ValueError, match="unknown arch 'tiny'"):
        FocalNet('tiny')
    with pytest.raises(ValueError, match='focal_levels.*3 entries'):
        FocalNet(dict(MICRO, focal_levels=[2, 2, 2]))
    with pytest.raises(ValueError, match='must be odd'):
        FocalNet(dict(MICRO, focal_windows=4))


def test_scalar_focal_settings_and_huge_modulation_norm():
    model = FocalNet(dict(MICRO, focal_levels=3, focal_windows=5))
    assert model.stages[3].blocks[0].attn.kernel_sizes == [5, 7, 9]
    with torch.device('meta'):
        huge = FocalNet('huge_fl4')
    assert isinstance(huge.stages[0].blocks[0].attn.ln, torch.nn.LayerNorm)
    assert isinstance(FocalNet(MICRO).stages[0].blocks[0].attn.ln, torch.nn.Identity)


@pytest.mark.parametrize('conv_embed', [False, True])
@pytest.mark.parametrize('size', [(64, 64), (100, 150), (33, 47), (3, 5)])
def test_any_input_size(size, conv_embed):
    model = FocalNet(dict(MICRO, use_conv_embed=conv_embed)).eval()
    outs = model(torch.randn(1, 3, *size))
    h, w = size
    for i, o in enumerate(outs):
        h, w = (-(-h // 4), -(-w // 4)) if i == 0 else (-(-h // 2), -(-w // 2))
        assert o.shape == (1, 8 * 2 ** i, h, w)


def test_post_norm_block_formula():
    torch.manual_seed(0)
    model = FocalNet(dict(MICRO, use_postln=True, use_layerscale=True, layerscale_value=0.5))
    model.eval()
    block = model.stages[0].blocks[0]
    x, hw = torch.randn(2, 12, 8), (3, 4)
    with torch.no_grad():
        y = x + 0.5 * block.norm1(block.attn(x, hw))
        y = y + 0.5 * block.norm2(block.ffn(y, hw))
        torch.testing.assert_close(block(x, hw), y)


def test_out_indices_frozen_stages_norm_eval():
    model = FocalNet(MICRO, out_indices=(1, ), frozen_stages=2, norm_eval=True)
    model.train()
    assert not any(p.requires_grad for p in model.stages[:2].parameters())
    assert all(p.requires_grad for p in model.stages[2:].parameters())
    assert not model.stages[0].training and model.stages[2].training
    outs = model(torch.randn(2, 3, 64, 64))
    assert len(outs) == 1 and outs[0].shape == (2, 16, 8, 8)
    # dense output norms only normalise the outputs
    full = FocalNet(MICRO).eval()
    full.load_state_dict(model.state_dict())
    with torch.no_grad():
        full.stages[1].norm.weight.mul_(3)
        x = torch.randn(1, 3, 64, 64)
        before = full(x)
        full.stages[0].norm.weight.mul_(2)
        after = full(x)
    assert torch.allclose(before[0] * 2, after[0], atol=1e-6)
    for o1, o2 in zip(before[1:], after[1:]):
        assert torch.equal(o1, o2)


def test_drop_path_rate_schedule():
    model = FocalNet(MICRO, drop_path_rate=0.4)
    rates = [getattr(b.drop_path, 'drop_prob', 0.) for s in model.stages for b in s.blocks]
    assert rates[0] == 0 and rates[-1] == pytest.approx(0.4)



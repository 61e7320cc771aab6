"""tools/convert_checkpoint.py and tools/export_to_mmpretrain.py.

Logits of the exported mmpretrain classifier are compared with the official
ImageNet classifier's, formed from each golden fixture (tests/classifier_cases.py).
"""
from pathlib import Path

import pytest
import torch
from ..tools import load_tool
from ..classifier_cases import CLASSIFIER_CASES, cases, fixture_arch, official_logits
from ..golden import assert_outputs_match, case_paths, load_fixture, write_released
from mmengine.config import Config
from mmengine.registry import DefaultScope

from vattn_mm.backbones import (CheckpointError, CheckpointMismatchError, FocalNet, LITv2, P2T,
                                build_backbone, released_families)
from vattn_mm.checkpoint.export import build_classifier, export_official, write_export

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = sorted(released_families())


CONVERT = load_tool('convert_checkpoint.py')
EXPORT = load_tool('export_to_mmpretrain.py')


def load_exported(cfg_path: str, ckpt_path: str, strict: bool = True):
    """Build the classifier from the written config and load the written
    checkpoint; returns the model and the load result."""
    model = build_classifier(Config.fromfile(cfg_path).model.to_dict(), 'cpu')
    sd = torch.load(ckpt_path, map_location='cpu', weights_only=True)['state_dict']
    result = model.load_state_dict(sd, strict=strict)
    return model.eval(), result


def test_every_family_has_a_classifier_case():
    assert {p.values[0] for p in CLASSIFIER_CASES} == set(FAMILIES)


@pytest.mark.parametrize('family,path', CLASSIFIER_CASES)
def test_official_export_gives_official_logits(family, path, tmp_path):
    rec = load_fixture(path)
    src = write_released(rec, tmp_path)
    EXPORT.main([src, '--family', family, '--arch', repr(fixture_arch(rec)),
                 '--out-dir', str(tmp_path / 'out'), '--name', 'cls'])
    model, _ = load_exported(str(tmp_path / 'out' / 'cls.py'), str(tmp_path / 'out' / 'cls.pth'))
    with torch.no_grad():
        logits = model(rec['input'], mode='tensor')
    reference = official_logits(family, rec)
    assert logits.shape == reference.shape
    assert_outputs_match([logits], [reference], tol=1e-5)
    # parameters without a gradient (earlier dense output norms) need DDP's
    # find_unused_parameters, which the config then sets
    model.train()
    model(rec['input'], mode='tensor').sum().backward()
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    cfg = Config.fromfile(str(tmp_path / 'out' / 'cls.py'))
    assert cfg.get('find_unused_parameters', False) == bool(unused)


def test_exported_config_and_inferencer(tmp_path):
    from mmpretrain.apis import ImageClassificationInferencer
    rec = load_fixture(case_paths('pvtv2')[0])
    src = write_released(rec, tmp_path)
    EXPORT.main([src, '--family', 'pvtv2', '--arch', repr(fixture_arch(rec)),
                 '--out-dir', str(tmp_path)])
    cfg_path = tmp_path / 'pvtv2_micro_li_mmpretrain.py'
    cfg = Config.fromfile(str(cfg_path))
    assert cfg.custom_imports.imports == ['vattn_mm']
    assert cfg.model.backbone.type == 'PVTv2' and cfg.model.backbone.out_indices == (3, )
    assert cfg.model.neck.type == 'GlobalAveragePooling'
    assert cfg.model.head.type == 'LinearClsHead' and cfg.model.head.num_classes == 10
    assert cfg.test_dataloader.dataset.pipeline[-1].type == 'PackInputs'
    # earlier tests leave another library's default scope current; a user's
    # fresh process starts in mmpretrain's, as the exported config says
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        inferencer = ImageClassificationInferencer(
            str(cfg_path), pretrained=str(tmp_path / 'pvtv2_micro_li_mmpretrain.pth'),
            device='cpu')
        image = torch.randint(0, 255, (120, 100, 3), dtype=torch.uint8).numpy()
        result = inferencer(image)[0]
    assert result['pred_scores'].shape == (10, )
    assert abs(float(result['pred_scores'].sum()) - 1) < 1e-5
    with pytest.raises(FileExistsError, match='exists'):
        EXPORT.main([src, '--family', 'pvtv2', '--arch', repr(fixture_arch(rec)),
                     '--out-dir', str(tmp_path)])


def test_written_config_loads_to_the_exported_entries(tmp_path):
    """The config file mmengine prints holds exactly the exported model."""
    rec = load_fixture(next(p for p in case_paths('litv2') if p.stem == 'micro_a05'))
    export = export_official(write_released(rec, tmp_path), 'litv2', fixture_arch(rec))
    cfg_path, _ = write_export(export, str(tmp_path), 'cls')
    cfg = Config.fromfile(cfg_path)
    assert cfg.model.to_dict() == export.model
    assert cfg.data_preprocessor.num_classes == export.num_classes == 10
    assert cfg.val_evaluator.to_dict() == cfg.test_evaluator.to_dict()
    assert (cfg.val_evaluator.type, cfg.val_evaluator.topk) == ('Accuracy', (1, 5))
    assert cfg.custom_imports.to_dict() == dict(imports=['vattn_mm'], allow_failed_imports=False)
    assert export.unused and cfg.find_unused_parameters is True    # stage 1-3 output norms
    assert Path(cfg_path).read_text().startswith(
        '# mmpretrain ImageClassifier exported by tools/export_to_mmpretrain.py')


def test_official_export_wrong_arch_names_keys(tmp_path):
    rec = load_fixture(case_paths('litv2')[0])
    src = write_released(rec, tmp_path)
    arch = dict(fixture_arch(rec), depths=[2, 2, 1, 1])
    with pytest.raises(CheckpointMismatchError, match=r'missing keys.*stages\.1\.blocks\.1\.'):
        EXPORT.main([src, '--family', 'litv2', '--arch', repr(arch), '--out-dir', str(tmp_path)])
    assert not list(tmp_path.glob('*_mmpretrain.*'))


# -------------------------------------------------- trained detector export
DET_BACKBONES = {
    'pvtv2': dict(type='PVTv2', arch=dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4],
                                          mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1],
                                          sr_ratios=[8, 4, 2, 1])),
    'litv2': dict(type='LITv2', arch=dict(embed_dim=16, depths=[1, 1, 1, 1],
                                          num_heads=[1, 2, 4, 8], alpha=0.5,
                                          local_ws=[0, 0, 2, 1], mlp_ratio=2)),
}


def _write_detector(tmp_path: Path, backbone: dict, channels: list) -> tuple[str, str]:
    """A tiny Mask R-CNN config and a checkpoint of it with random weights."""
    cfg_path = tmp_path / 'tiny_maskrcnn.py'
    backbone = dict(backbone, _delete_=True, frozen_stages=1,
                    init_cfg=dict(type='Pretrained', checkpoint='not/there.pth'))
    cfg_path.write_text(
        "_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py']\n"
        "custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)\n"
        f'model = dict(backbone={backbone!r}, neck=dict(in_channels={channels!r}))\n')
    from mmdet.registry import MODELS
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        detector = MODELS.build(Config.fromfile(str(cfg_path)).model)
    with torch.no_grad():
        for param in detector.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    ckpt = tmp_path / 'tiny_maskrcnn.pth'
    torch.save({'state_dict': detector.state_dict(), 'meta': {}}, ckpt)
    return str(cfg_path), str(ckpt)


@pytest.mark.parametrize('family', sorted(DET_BACKBONES))
def test_detector_export_same_backbone_features(family, tmp_path):
    backbone = DET_BACKBONES[family]
    channels = build_backbone(family, backbone['arch'], device='meta').out_channels
    cfg_path, ckpt = _write_detector(tmp_path, backbone, channels)
    EXPORT.main([ckpt, '--config', cfg_path, '--num-classes', '7',
                 '--out-dir', str(tmp_path / 'out'), '--name', 'cls'])
    model, result = load_exported(str(tmp_path / 'out' / 'cls.py'),
                                  str(tmp_path / 'out' / 'cls.pth'), strict=False)
    assert sorted(result.missing_keys) == ['head.fc.bias', 'head.fc.weight']
    assert not result.unexpected_keys
    det_sd = torch.load(ckpt, weights_only=True)['state_dict']
    source = build_backbone(family, backbone['arch'], device='cpu')
    source.load_state_dict({k[len('backbone.'):]: v for k, v in det_sd.items()
                            if k.startswith('backbone.')})
    source.eval()
    x = torch.randn(1, 3, 96, 128)
    with torch.no_grad():
        assert torch.equal(model.backbone(x)[-1], source(x)[-1])
        assert model(x, mode='tensor').shape == (1, 7)
    cfg = Config.fromfile(str(tmp_path / 'out' / 'cls.py'))
    assert 'init_cfg' not in cfg.model.backbone and 'frozen_stages' not in cfg.model.backbone
    assert cfg.get('find_unused_parameters', False) == (family == 'litv2')  # stage 1-2 norms


# ------------------------------------------------------------- conversion
ROUND_TRIP_CASES = [c for f in FAMILIES for c in cases(f)]


def _convert(*argv) -> None:
    CONVERT.main([str(a) for a in argv])


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def assert_same_file(a, b) -> None:
    """Same wrapper, same keys, equal tensors."""
    a, b = _load(a), _load(b)
    assert a.keys() == b.keys()
    if a.keys() in ({'model'}, {'state_dict'}):
        wrapper = next(iter(a))
        a, b = a[wrapper], b[wrapper]
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape and torch.equal(a[key], b[key]), key


@pytest.mark.parametrize('family,path', ROUND_TRIP_CASES)
def test_official_round_trip_exact(family, path, tmp_path):
    rec = load_fixture(path)
    src = write_released(rec, tmp_path)
    arch = fixture_arch(rec)     # FocalNet: the dense focal windows -> padded kernels
    _convert(src, tmp_path / 'ours.pth', '--family', family, '--arch', repr(arch))
    ours = _load(tmp_path / 'ours.pth')
    assert all(k.startswith('stages.') for k in ours['state_dict'])
    model = build_backbone(family, arch, device='cpu')
    model.load_state_dict(ours['state_dict'], strict=False)  # our keys, our shapes
    _convert(tmp_path / 'ours.pth', tmp_path / 'back.pth', '--to', 'official')
    assert_same_file(src, tmp_path / 'back.pth')


def test_converted_file_loads_as_pretrained(tmp_path):
    rec = load_fixture(case_paths('p2t')[0])
    src = write_released(rec, tmp_path)
    _convert(src, tmp_path / 'ours.pth', '--family', 'p2t', '--arch', repr(fixture_arch(rec)))
    for path in (src, tmp_path / 'ours.pth'):
        model = build_backbone('p2t', fixture_arch(rec), device='cpu', drop_path_rate=0.,
                               init_cfg=dict(type='Pretrained', checkpoint=str(path)))
        model.init_weights()
        with torch.no_grad():
            assert_outputs_match(model.eval()(rec['input']), rec['outputs'])


def test_trained_round_trip_and_detector_source(tmp_path):
    """ours -> official -> ours is exact too, from a whole-detector file; P2T's
    linear FFN weights become 1x1 convs officially."""
    arch = dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                depths=[1, 1, 1, 1])
    model = build_backbone('p2t', arch, device='cpu')
    model.init_weights()
    sd = model.state_dict()
    torch.save({'state_dict': {**{'backbone.' + k: v for k, v in sd.items()},
                               'neck.conv.weight': torch.zeros(1)}, 'meta': {}},
               tmp_path / 'det.pth')
    _convert(tmp_path / 'det.pth', tmp_path / 'official.pth', '--to', 'official',
             '--family', 'p2t', '--arch', repr(arch))
    official = _load(tmp_path / 'official.pth')      # P2T releases are raw state dicts
    assert official['block1.0.mlp.fc1.weight'].dim() == 4
    assert official.keys() == P2T.converter.ours_to_official(sd).keys()
    _convert(tmp_path / 'official.pth', tmp_path / 'ours.pth', '--family', 'p2t',
             '--arch', repr(arch))
    back = _load(tmp_path / 'ours.pth')['state_dict']
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)


def test_dense_only_keys_to_official(tmp_path):
    model = build_backbone('litv2', DET_BACKBONES['litv2']['arch'], device='cpu')
    torch.save(model.state_dict(), tmp_path / 'ours.pth')
    _convert(tmp_path / 'ours.pth', tmp_path / 'keep.pth', '--to', 'official', '--family', 'litv2')
    _convert(tmp_path / 'ours.pth', tmp_path / 'drop.pth', '--to', 'official', '--family', 'litv2',
             '--drop-dense-only')
    keep, drop = _load(tmp_path / 'keep.pth')['model'], _load(tmp_path / 'drop.pth')['model']
    dense = {k for k in keep if k.startswith('stages.')}
    assert dense == {f'stages.{i}.norm.{n}' for i in (1, 2, 3) for n in ('weight', 'bias')}
    assert keep.keys() == LITv2.converter.ours_to_official(model.state_dict()).keys()
    assert drop.keys() == keep.keys() - dense


def test_focalnet_trained_kernels_stay_at_model_size(tmp_path):
    """Padded kernels crop back to the released window only while their border
    is zero; trained weights outside it are written at the model's window
    size (what the official dense code loads)."""
    rec = load_fixture(next(p for p in case_paths('focalnet') if p.stem == 'micro_srf'))
    src = write_released(rec, tmp_path)
    _convert(src, tmp_path / 'ours.pth', '--family', 'focalnet', '--arch', repr(fixture_arch(rec)))
    ours = _load(tmp_path / 'ours.pth')
    key = 'stages.0.blocks.0.attn.focal_layers.0.weight'
    assert ours['state_dict'][key].shape[-1] == 9            # 3x3 padded for the 9x9 model
    ours['state_dict'][key][:, :, 0, 0] += 1.0                 # "trained" outside 3x3
    torch.save(ours, tmp_path / 'trained.pth')
    _convert(tmp_path / 'trained.pth', tmp_path / 'official.pth', '--to', 'official')
    official = _load(tmp_path / 'official.pth')['model']
    released = rec['checkpoint']
    assert official.keys() == released.keys()
    name = 'layers.0.blocks.0.modulation.focal_layers.0.0.weight'
    assert official[name].shape[-1] == 9
    for k in released:
        if k != name:
            assert official[k].shape == released[k].shape and torch.equal(official[k], released[k])
    model = build_backbone('focalnet', dict(embed_dim=8, depths=[1, 1, 1, 1],
                                            focal_levels=[2] * 4, focal_windows=[9] * 4))
    official = FocalNet.converter.ours_to_official(model.state_dict())
    assert 'norm0.weight' in official                 # the official dense output norm
    assert official[name].shape[-1] == 9


@pytest.mark.parametrize('family,arch,pattern', [
    ('litv2', 's', r'unexpected keys.*patch_embed1\.proj'),     # a PVTv2 file
    ('pvtv2', 'b0', r'mis-shaped keys.*stages\.0\.patch_embed\.proj\.weight'),
    ('pvtv2', 'b2_li', r'missing keys'),
])
def test_wrong_family_or_variant_names_keys(family, arch, pattern, tmp_path):
    src = write_released(load_fixture(case_paths('pvtv2')[1]), tmp_path)   # micro_sr
    with pytest.raises(CheckpointMismatchError, match=pattern):
        _convert(src, tmp_path / 'out.pth', '--family', family, '--arch', arch)
    assert not (tmp_path / 'out.pth').exists()


def test_file_safety_and_bad_input(tmp_path):
    rec = load_fixture(case_paths('pvtv2')[1])
    src = write_released(rec, tmp_path)
    arch = repr(fixture_arch(rec))
    before = Path(src).read_bytes()
    with pytest.raises(FileExistsError, match='input file'):
        _convert(src, src, '--family', 'pvtv2', '--arch', arch, '--overwrite')
    _convert(src, tmp_path / 'ours.pth', '--family', 'pvtv2', '--arch', arch)
    with pytest.raises(FileExistsError, match='--overwrite'):
        _convert(src, tmp_path / 'ours.pth', '--family', 'pvtv2', '--arch', arch)
    assert Path(src).read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith('.tmp')]
    with pytest.raises(CheckpointError, match='holds vattn-mm keys.*expected official'):
        _convert(tmp_path / 'ours.pth', tmp_path / 'x.pth', '--family', 'pvtv2', '--arch', arch)
    with pytest.raises(CheckpointError, match="do not start with 'stages.'"):
        _convert(src, tmp_path / 'x.pth', '--to', 'official', '--family', 'pvtv2')
    with pytest.raises(ValueError, match='converted from a pvtv2 checkpoint'):
        _convert(tmp_path / 'ours.pth', tmp_path / 'x.pth', '--to', 'official',
                 '--family', 'litv2')
    with pytest.raises(SystemExit):
        _convert(src, tmp_path / 'x.pth', '--family', 'pvtv2')      # no --arch

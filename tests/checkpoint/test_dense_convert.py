"""Released detection / segmentation checkpoints (mmdet 2.x / mmseg 0.x layout:
the backbone under ``backbone.`` in the official key names, necks and heads in
mmdet 2.x / mmseg 0.x names) converted for our configs by
``tools/convert_checkpoint.py --config``: every tensor back in place, strict
loading, clear errors that write nothing, and ``tools/test.py`` on the result.

The official-layout files are made from our models with the existing reverse
converters (:func:`~vattn_mm.checkpoint.official_dense_state_dict`); each case
also checks a few official names against the official dense code, so a
converter that renamed both ways wrongly would fail here."""
import json
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.hub import get_config
from mmengine.registry import DATASETS, MODELS, DefaultScope

from vattn_mm.backbones import CheckpointError, CheckpointMismatchError
from vattn_mm.checkpoint import (convert_dense_checkpoint, convert_dense_file,
                                 official_dense_state_dict)

from ..engine.test_training import DET_DEMO, data_options, run_tool
from ..tools import load_tool

#: slow (converted checkpoints evaluated through tools/test.py)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CONVERT = load_tool('convert_checkpoint.py')

#: config, family, source meta, official dense keys the file must hold
#: (whai362/PVT ``detection/pvt_v2.py``, ziplab/LITv2 ``detection/mmdet/models/
#: backbones/litv2.py``, yuhuan-wu/P2T ``segmentation/p2t.py``, microsoft/FocalNet
#: ``detection/mmdet/models/backbones/focalnet.py``) and of mmdet 2.x / mmseg 0.x heads
CASES = {
    'pvtv2_retinanet': (
        'configs/pvtv2_b0_retinanet_coco.py', 'pvtv2', dict(mmdet_version='2.28.2'),
        ['backbone.patch_embed1.proj.weight', 'backbone.block1.0.attn.sr.weight',
         'backbone.block4.1.mlp.dwconv.dwconv.weight', 'backbone.norm4.weight',
         'neck.lateral_convs.0.conv.weight', 'bbox_head.cls_convs.0.conv.weight',
         'bbox_head.retina_cls.weight']),
    'litv2_maskrcnn': (
        'configs/litv2_s_maskrcnn_coco.py', 'litv2', dict(mmdet_version='2.11.0'),
        ['backbone.patch_embed.proj.weight', 'backbone.layers.0.downsample.dconv.weight',
         'backbone.layers.2.blocks.0.attn.h_qkv.weight', 'backbone.norm1.weight',
         'backbone.norm3.bias', 'rpn_head.rpn_conv.weight',
         'roi_head.bbox_head.shared_fcs.1.weight', 'roi_head.mask_head.conv_logits.weight']),
    'p2t_fpn': (
        'configs/p2t_t_fpn_ade20k.py', 'p2t', dict(mmseg_version='0.11.0'),
        ['backbone.patch_embed1.proj.weight', 'backbone.d_convs1.0.weight',
         'backbone.block1.0.attn.q.0.weight', 'backbone.block1.0.mlp.fc1.weight',
         'decode_head.scale_heads.0.0.conv.weight', 'decode_head.conv_seg.weight']),
    'focalnet_retinanet': (
        'configs/focalnet_t_srf_retinanet_coco.py', 'focalnet', dict(mmdet_version='2.25.0'),
        ['backbone.patch_embed.proj.weight', 'backbone.norm0.weight', 'backbone.norm3.bias',
         'backbone.layers.0.blocks.0.modulation.focal_layers.0.0.weight',
         'backbone.layers.0.downsample.proj.weight', 'bbox_head.retina_reg.weight']),
}


def build_model(config: str) -> torch.nn.Module:
    cfg = Config.fromfile(str(ROOT / config))
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return MODELS.build(cfg.model)


def classes_of(config: str) -> tuple:
    """The class names of the config's (registered) test dataset."""
    cfg = Config.fromfile(str(ROOT / config))
    dataset = DATASETS.get(f'{cfg.default_scope}.{cfg.test_dataloader.dataset.type}')
    return tuple(dataset.METAINFO['classes'])


def write_official(sd: dict, family: str, meta: dict, path: Path, ddp: bool = False) -> dict:
    """``sd`` as a released mmdet 2.x / mmseg 0.x file: official backbone keys,
    ``meta`` with ``CLASSES``, the optimizer state beside the weights."""
    official = official_dense_state_dict(sd, family)
    weights = {('module.' if ddp else '') + k: v for k, v in official.items()}
    torch.save({'meta': meta, 'state_dict': weights,
                'optimizer': {'state': {}, 'param_groups': [{'lr': 1e-4, 'params': [0]}]}},
               path)
    return official


@pytest.fixture(scope='module')
def released(tmp_path_factory):
    """``released(case) -> (path, model)``: the case's model, its initial
    weights written in the official dense layout, once a module."""
    cache = {}

    def get(case: str):
        if case not in cache:
            config, family, meta, _ = CASES[case]
            model = build_model(config)
            path = tmp_path_factory.mktemp('released') / f'{case}.pth'
            meta = dict(meta, CLASSES=classes_of(config))
            write_official(model.state_dict(), family, meta, path, ddp=case == 'litv2_maskrcnn')
            cache[case] = str(path), model
        return cache[case]
    return get


@pytest.mark.parametrize('case', sorted(CASES))
def test_official_dense_checkpoint_loads_strictly(case, released, tmp_path):
    config, family, _, official_keys = CASES[case]
    src, model = released(case)
    ours = model.state_dict()
    official = torch.load(src, weights_only=True)['state_dict']
    official = {k.removeprefix('module.'): v for k, v in official.items()}
    assert set(official_keys) <= official.keys(), sorted(set(official_keys) - official.keys())
    assert not any(k.startswith('backbone.stages.') for k in official)

    out = tmp_path / 'converted.pth'
    conv = convert_dense_file(src, str(out), str(ROOT / config))
    assert conv.family == family and conv.source_format == f'official {family}'
    written = torch.load(out, weights_only=True)
    assert set(written) == {'meta', 'state_dict'}
    assert list(written['state_dict']) == list(ours)
    for key, value in ours.items():
        assert torch.equal(written['state_dict'][key], value), key
    model.load_state_dict(written['state_dict'], strict=True)
    meta = written['meta']
    assert meta['dataset_meta']['classes'] == classes_of(config)
    assert meta['vattn_mm']['family'] == family
    assert meta['vattn_mm']['converted_from'] == Path(src).name
    if family == 'p2t':     # the official 1x1-conv FFN weights are 4-D, ours linear
        key = 'block1.0.mlp.fc1.weight'
        assert official['backbone.' + key].dim() == 4
        assert written['state_dict']['backbone.stages.0.blocks.0.ffn.fc1.weight'].dim() == 2


def test_smaller_focal_kernels_are_padded(released, tmp_path):
    """An official dense FocalNet file trained with the ImageNet focal window
    (3) loads into the dense config's window (9): kernels zero-padded at the
    centre, as the family converter does for ImageNet files."""
    src, _ = released('focalnet_retinanet')
    obj = torch.load(src, weights_only=True)
    key = 'backbone.layers.0.blocks.0.modulation.focal_layers.0.0.weight'
    kernel = obj['state_dict'][key]
    assert kernel.shape[-1] == 9
    obj['state_dict'][key] = kernel[..., 3:6, 3:6].clone()
    small = tmp_path / 'small.pth'
    torch.save(obj, small)
    conv = convert_dense_checkpoint(str(small), str(ROOT / CASES['focalnet_retinanet'][0]))
    padded = conv.state_dict['backbone.stages.0.blocks.0.attn.focal_layers.0.weight']
    assert padded.shape == kernel.shape
    assert torch.equal(padded[..., 3:6, 3:6], kernel[..., 3:6, 3:6])
    assert padded.abs().sum() == padded[..., 3:6, 3:6].abs().sum()
    assert any('pad' in note.lower() for note in conv.notes), conv.notes


def test_bad_checkpoints_are_clear_errors_and_write_nothing(released, tmp_path):
    retina_src, _ = released('pvtv2_retinanet')
    fpn_src, _ = released('p2t_fpn')
    out = tmp_path / 'out.pth'

    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(Path(retina_src).read_bytes()[:100_000])
    with pytest.raises(CheckpointError, match='truncated.pth'):
        convert_dense_file(str(truncated), str(out), str(ROOT / CASES['pvtv2_retinanet'][0]))

    # a PVTv2 detector for a FocalNet config: the backbone keys are named
    with pytest.raises(CheckpointMismatchError,
                       match=r'backbone of .* FocalNet .*missing keys .*stages\.0\.'):
        convert_dense_file(retina_src, str(out), str(ROOT / CASES['focalnet_retinanet'][0]))

    # a P2T-T Semantic FPN for the P2T-T RetinaNet config: the backbone fits, the heads do not
    with pytest.raises(CheckpointMismatchError,
                       match=r'outside the backbone: missing keys .*bbox_head\..*'
                             r'unexpected keys .*decode_head\.'):
        convert_dense_file(fpn_src, str(out), str(ROOT / 'configs/p2t_t_retinanet_coco.py'))

    # an ImageNet release has no detector keys
    imagenet = tmp_path / 'imagenet.pth'
    sd = torch.load(retina_src, weights_only=True)['state_dict']
    torch.save({k[len('backbone.'):]: v for k, v in sd.items() if k.startswith('backbone.')},
               imagenet)
    with pytest.raises(CheckpointError, match='no backbone.* keys'):
        convert_dense_file(str(imagenet), str(out), str(ROOT / CASES['pvtv2_retinanet'][0]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ['imagenet.pth', 'truncated.pth']

    with pytest.raises(ValueError, match='no vattn-mm backbone .*ResNet'):
        convert_dense_checkpoint(retina_src,
                                 get_config('mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'))


def test_cli_end_to_end_and_tools_test(demo_trained, demo_data, tmp_path, capsys):
    """A demo Mask R-CNN's weights as an official mmdet 2.x release, through
    the CLI, evaluated by tools/test.py (which loads only exact fits)."""
    work = demo_trained(DET_DEMO)
    trained = torch.load((work / 'last_checkpoint').read_text().strip(), weights_only=True)
    src = tmp_path / 'mask_rcnn_pvt_v2_b0_demo.pth'
    write_official(trained['state_dict'], 'pvtv2', dict(mmdet_version='2.28.2'), src)
    out = tmp_path / 'converted.pth'
    CONVERT.main([str(src), str(out), '--config', DET_DEMO])
    assert 'loads strictly' in capsys.readouterr().out
    with pytest.raises(FileExistsError, match='--overwrite'):
        CONVERT.main([str(src), str(out), '--config', DET_DEMO])
    with pytest.raises(SystemExit):
        CONVERT.main([str(src), str(out), '--config', DET_DEMO, '--family', 'pvtv2'])
    assert 'drop --family' in capsys.readouterr().err
    written = torch.load(out, weights_only=True)['state_dict']
    assert all(torch.equal(written[k], v) for k, v in trained['state_dict'].items())

    run_tool([sys.executable, 'tools/test.py', DET_DEMO, str(out), '--work-dir',
              str(tmp_path / 'test'), '--cfg-options', *data_options(demo_data, DET_DEMO),
              'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False'])
    metrics = json.loads((tmp_path / 'test' / 'test_metrics.json').read_text())
    assert isinstance(metrics['coco/bbox_mAP'], float)

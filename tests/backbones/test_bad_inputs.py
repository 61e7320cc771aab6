"""Malformed inputs: each gets a clear error naming the problem, or is
handled correctly, and nothing already written is lost.

Images (odd sizes, extreme aspect ratios, grayscale, RGBA, corrupt files)
through the demo detector's real test pipeline; COCO annotation files (no
images, no objects, out-of-bounds and degenerate boxes) and missing data
roots through the real datasets; checkpoints of another family / variant and
truncated files through pretrained loading, resume and ``tools/test.py``;
configs with an unknown backbone type or arch; and every registered backbone
on inputs below its minimum and on sizes not divisible by 32.
"""
import json
import math
import os
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
from ..backbone_cases import CASES, build_micro
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from ..engine.test_training import ROOT

from vattn_mm.backbones import CheckpointError, CheckpointMismatchError, P2T, PVTv2
from vattn_mm.datasets import CLASSES, make_demo_dataset
from vattn_mm.engine import NameImageErrors
from vattn_mm.utils import (EmptyDatasetError, ImageLoadError, UnreadableCheckpointError,
                            build_dataset, load_runner_checkpoint)

DET_DEMO = ROOT / 'configs/demo/pvtv2_b0_maskrcnn_demo.py'
SEG_DEMO = ROOT / 'configs/demo/pvtv2_b0_upernet_demo.py'


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    return make_demo_dataset(tmp_path_factory.mktemp('demo'), num_train=4, num_val=2, size=64)


@pytest.fixture(scope='module')
def detector():
    """The demo Mask R-CNN (random weights) with few proposals, for speed."""
    from mmdet.apis import init_detector
    cfg = Config.fromfile(str(DET_DEMO))
    cfg.model.test_cfg.rpn.update(nms_pre=50, max_per_img=20)
    cfg.model.test_cfg.rcnn.max_per_img = 5
    for step in cfg.test_dataloader.dataset.pipeline:
        if step.type == 'Resize':
            step.scale = (128, 128)
    return init_detector(cfg, None, device='cpu')


# ---------------------------------------------------------------- images
RNG = np.random.default_rng(0)
IMAGES = {
    '1x1': RNG.integers(0, 256, (1, 1, 3)),
    '31x33': RNG.integers(0, 256, (31, 33, 3)),
    '20:1 wide': RNG.integers(0, 256, (20, 400, 3)),
    '1:20 tall': RNG.integers(0, 256, (400, 20, 3)),
    'grayscale': RNG.integers(0, 256, (50, 60)),
    'RGBA': RNG.integers(0, 256, (50, 60, 4)),
}


@pytest.mark.parametrize('name', IMAGES)
@pytest.mark.needs('mmdet')
def test_odd_images_are_detected_in_image_coordinates(name, detector, tmp_path):
    """Resize + pad to 32 bring every image to a valid input; predictions
    come back in the original image's coordinates, masks at its size."""
    from mmdet.apis import inference_detector
    array = IMAGES[name].astype(np.uint8)
    path = str(tmp_path / 'image.png')
    cv2.imwrite(path, array)
    result = inference_detector(detector, path)
    h, w = array.shape[:2]
    assert result.metainfo['ori_shape'] == (h, w)
    pred = result.pred_instances
    assert len(pred) > 0 and torch.isfinite(pred.bboxes).all()
    assert (pred.bboxes[:, 0::2] >= 0).all() and (pred.bboxes[:, 0::2] <= w).all()
    assert (pred.bboxes[:, 1::2] >= 0).all() and (pred.bboxes[:, 1::2] <= h).all()
    assert pred.masks.shape[1:] == (h, w)


def _good_jpeg() -> bytes:
    ok, data = cv2.imencode('.jpg', RNG.integers(0, 256, (64, 64, 3)).astype(np.uint8))
    return data.tobytes()


CORRUPT = {
    'garbage bytes': b'this is not an image' * 8,
    'truncated JPEG': _good_jpeg()[:300],
    'empty file': b'',
}


@pytest.mark.parametrize('name', CORRUPT)
def test_corrupt_image_names_the_file(name, tmp_path):
    from mmcv.transforms import LoadImageFromFile
    path = tmp_path / 'broken.jpg'
    path.write_bytes(CORRUPT[name])
    with pytest.raises(ImageLoadError, match=f"failed to load image '{path}'"):
        NameImageErrors(LoadImageFromFile())(dict(img_path=str(path)))


def test_missing_image_file_names_the_file(tmp_path):
    from mmcv.transforms import LoadImageFromFile
    with pytest.raises(FileNotFoundError, match='missing.jpg'):
        NameImageErrors(LoadImageFromFile())(dict(img_path=str(tmp_path / 'missing.jpg')))


# ------------------------------------------------------ COCO annotations
def coco_dataset(root, coco: dict, tmp_path, test_mode: bool = False, pipeline=()):
    """The demo's CocoDataset on an edited copy of the training annotations,
    built as SafeRunner builds it."""
    init_default_scope('mmdet')
    ann = tmp_path / 'instances.json'
    ann.write_text(json.dumps(coco))
    return build_dataset(dict(
        type='CocoDataset', data_root=f'{root}/coco/', ann_file=str(ann),
        data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES), test_mode=test_mode,
        filter_cfg=dict(filter_empty_gt=True, min_size=8), pipeline=list(pipeline)))


@pytest.fixture
def coco(demo):
    return json.loads((demo / 'coco/annotations/instances_train.json').read_text())


@pytest.mark.needs('mmdet')
def test_annotation_file_without_images(demo, coco, tmp_path):
    coco.update(images=[], annotations=[])
    with pytest.raises(EmptyDatasetError,
                       match=r"CocoDataset has no samples: ann_file='.*instances"):
        coco_dataset(demo, coco, tmp_path)


@pytest.mark.needs('mmdet')
def test_training_set_without_objects(demo, coco, tmp_path):
    coco['annotations'] = []
    with pytest.raises(EmptyDatasetError, match='filter_empty_gt'):
        coco_dataset(demo, coco, tmp_path)


@pytest.mark.needs('mmdet')
def test_test_set_without_objects_keeps_every_image(demo, coco, tmp_path):
    coco['annotations'] = []
    dataset = coco_dataset(demo, coco, tmp_path, test_mode=True)
    assert len(dataset) == len(coco['images'])
    assert all(dataset.get_data_info(i)['instances'] == [] for i in range(len(dataset)))


@pytest.mark.needs('mmdet')
def test_partly_outside_box_is_clipped_to_the_image(demo, coco, tmp_path):
    first = coco['annotations'][0]
    image = next(i for i in coco['images'] if i['id'] == first['image_id'])
    first['bbox'] = [image['width'] - 10, image['height'] - 12, 50, 60]  # 40 / 48 px outside
    pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
                dict(type='Resize', scale=(128, 128), keep_ratio=True)]
    dataset = coco_dataset(demo, coco, tmp_path, pipeline=pipeline)
    index = next(i for i in range(len(dataset))
                 if dataset.get_data_info(i)['img_id'] == first['image_id'])
    sample = dataset[index]
    h, w = sample['img_shape']
    boxes = sample['gt_bboxes'].tensor
    assert (boxes[:, 0::2] <= w).all() and (boxes[:, 1::2] <= h).all() and (boxes >= 0).all()
    scale = w / image['width']
    expected = torch.tensor([image['width'] - 10, image['height'] - 12,
                             image['width'], image['height']]) * scale
    assert torch.isclose(boxes, expected, atol=1e-3).all(1).any(), boxes


@pytest.mark.parametrize('bbox', [[500., 500., 20., 20.], [-80., -80., 30., 30.],
                                  [10., 10., 0., 15.], [10., 10., -5., 15.]],
                         ids=['outside', 'negative-outside', 'zero-width', 'negative-width'])
@pytest.mark.needs('mmdet')
def test_box_outside_or_degenerate_is_dropped(bbox, demo, coco, tmp_path):
    first = coco['annotations'][0]
    first['bbox'] = bbox
    first['area'] = max(bbox[2], 0) * max(bbox[3], 0)
    dataset = coco_dataset(demo, coco, tmp_path)
    kept = sum(len(dataset.get_data_info(i)['instances']) for i in range(len(dataset)))
    assert kept == len(coco['annotations']) - 1


@pytest.mark.parametrize('serialize', [True, False], ids=['serialized', 'not-serialized'])
@pytest.mark.needs('mmdet', 'mmseg')
def test_empty_image_folder(serialize, tmp_path):
    """Without the check: 'need at least one array to concatenate', or (not
    serialized) an InfiniteSampler that loops forever looking for a sample."""
    init_default_scope('mmseg')
    for sub in ('images/training', 'annotations/training'):
        (tmp_path / sub).mkdir(parents=True)
    with pytest.raises(EmptyDatasetError, match='BaseSegDataset has no samples'):
        build_dataset(dict(type='BaseSegDataset', data_root=str(tmp_path), img_suffix='.jpg',
                           seg_map_suffix='.png', serialize_data=serialize,
                           data_prefix=dict(img_path='images/training',
                                            seg_map_path='annotations/training')))


@pytest.mark.needs('mmdet', 'mmseg')
def test_missing_data_root_names_the_path():
    from mmdet.datasets import CocoDataset
    from mmseg.datasets import BaseSegDataset
    with pytest.raises(FileNotFoundError, match='/no/such/root/annotations/instances_train.json'):
        CocoDataset(data_root='/no/such/root/', ann_file='annotations/instances_train.json',
                    data_prefix=dict(img='train/'))
    with pytest.raises(FileNotFoundError, match='/no/such/root/images/training'):
        BaseSegDataset(data_root='/no/such/root/', img_suffix='.jpg', seg_map_suffix='.png',
                       data_prefix=dict(img_path='images/training',
                                        seg_map_path='annotations/training'))


# ------------------------------------------------------------ checkpoints
PVT_MICRO = CASES['PVTv2'].micro


def pretrained(cls, arch, path):
    return cls(arch, init_cfg=dict(type='Pretrained', checkpoint=str(path)))


def test_checkpoint_of_another_family(tmp_path):
    path = tmp_path / 'p2t.pth'
    torch.save(P2T(CASES['P2T'].micro).state_dict(), path)
    with pytest.raises(CheckpointMismatchError, match=r'does not fit PVTv2.*(missing|unexpected)'):
        pretrained(PVTv2, PVT_MICRO, path).init_weights()


def test_checkpoint_of_another_variant(tmp_path):
    path = tmp_path / 'wider.pth'
    torch.save({'model': PVTv2(dict(PVT_MICRO, embed_dims=[16, 32, 48, 64])).state_dict()}, path)
    with pytest.raises(CheckpointMismatchError,
                       match=r'mis-shaped keys \(\d+\): .*checkpoint \(16'):
        pretrained(PVTv2, PVT_MICRO, path).init_weights()


@pytest.fixture
def truncated(tmp_path):
    path = tmp_path / 'truncated.pth'
    torch.save({'state_dict': PVTv2(PVT_MICRO).state_dict()}, path)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    return path


def test_truncated_pretrained_checkpoint(truncated):
    with pytest.raises(CheckpointError, match='truncated or corrupt'):
        pretrained(PVTv2, PVT_MICRO, truncated).init_weights()


def test_truncated_checkpoint_on_resume_or_load_from(truncated):
    with pytest.raises(UnreadableCheckpointError, match=f'{truncated}.*truncated or corrupt'):
        load_runner_checkpoint(str(truncated))


@pytest.mark.needs('mmseg')
def test_evaluating_a_checkpoint_of_another_variant_fails_and_keeps_results(demo, tmp_path):
    """tools/test.py refuses a whole-model checkpoint that does not fit the
    config (mmengine alone would evaluate random weights) and leaves the
    earlier test_metrics.json alone."""
    cfg = Config.fromfile(str(SEG_DEMO))
    cfg.model.backbone.arch = 'b1'  # another PVTv2 variant, same heads
    cfg.model.decode_head.in_channels = [64, 128, 320, 512]
    cfg.model.auxiliary_head.in_channels = 320
    init_default_scope('mmseg')
    torch.save({'state_dict': MODELS.build(cfg.model).state_dict(), 'meta': {}},
               tmp_path / 'b1.pth')
    work = tmp_path / 'work'
    work.mkdir()
    (work / 'test_metrics.json').write_text('{"mIoU": 41.0}')
    ade = f'{demo}/ade/'
    proc = subprocess.run(
        [sys.executable, 'tools/test.py', str(SEG_DEMO), str(tmp_path / 'b1.pth'),
         '--work-dir', str(work), '--cfg-options', f'test_dataloader.dataset.data_root={ade}',
         'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False'],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1'),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert 'CheckpointMismatchError' in proc.stderr and 'mis-shaped keys' in proc.stderr, \
        proc.stderr[-3000:]
    assert (work / 'test_metrics.json').read_text() == '{"mIoU": 41.0}'


# --------------------------------------------------------------- configs
@pytest.mark.needs('mmdet')
def test_unknown_backbone_type():
    from mmdet.registry import MODELS as DET
    with pytest.raises(KeyError, match='PVTv9 is not in the'):
        DET.build(dict(type='PVTv9', arch='b0'))


@pytest.mark.parametrize('arch, error', [
    ('b9', r"PVTv2: unknown arch 'b9'; choose one of \['b0'"),
    (dict(PVT_MICRO, window=7), r"PVTv2: bad arch dict; unknown keys \['window'\]"),
    ({k: v for k, v in PVT_MICRO.items() if k != 'depths'},
     r"PVTv2: bad arch dict; missing keys \['depths'\]"),
], ids=['unknown-name', 'unknown-key', 'missing-key'])
def test_unknown_arch(arch, error):
    with pytest.raises(ValueError, match=error):
        MODELS.build(dict(type='PVTv2', arch=arch))


# ------------------------------------------------------------- backbones
@pytest.fixture(scope='module')
def micro():
    return {name: build_micro(name).eval() for name in CASES}


@pytest.mark.parametrize('name', CASES)
@pytest.mark.parametrize('hw', [(31, 33), (36, 720)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_sizes_not_divisible_by_32(name, hw, micro):
    """Four finite maps, stride 4 then halving (rounded up or down) per stage;
    a backbone whose grids are floored (Agent-PVT, as officially) refuses
    sides below its last stride with a clear error instead."""
    model = micro[name]
    if min(hw) < model.min_input_size:
        with pytest.raises(ValueError, match=f'each side needs at least {model.min_input_size}'):
            model(torch.randn(1, 3, *hw))
        return
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *hw))
    assert len(outs) == 4
    sides = [tuple(math.ceil(s / 4) for s in hw)]
    for out in outs[1:]:
        prev = sides[-1]
        got = tuple(out.shape[2:])
        assert all(g in (p // 2, (p + 1) // 2) for g, p in zip(got, prev)), (prev, got)
        sides.append(got)
    assert tuple(outs[0].shape[2:]) == sides[0]
    assert all(torch.isfinite(o).all() for o in outs)


@pytest.mark.parametrize('name', CASES)
@pytest.mark.parametrize('hw', [(1, 1), (16, 320)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_inputs_below_the_minimum(name, hw, micro):
    """Either finite maps of at least 1x1 or a ValueError saying the input
    is too small, never a low-level error from inside a layer."""
    try:
        with torch.no_grad():
            outs = micro[name](torch.randn(1, 3, *hw))
    except ValueError as err:
        assert 'too small' in str(err), err
        return
    assert all(min(o.shape[2:]) >= 1 and torch.isfinite(o).all() for o in outs)


def _install_needing_a_pebibyte(venv) -> subprocess.CompletedProcess:
    """tools/install.sh into ``venv`` with a free-disk threshold of 2**40 GiB."""
    return subprocess.run(
        ['bash', str(ROOT / 'tools/install.sh')],
        env={**os.environ, 'VATTN_VENV': str(venv), 'VATTN_MIN_FREE_GIB': str(2**40)},
        capture_output=True, text=True, timeout=60)


def test_install_without_enough_disk_stops_before_writing(tmp_path):
    """tools/install.sh checks free disk first instead of failing half-way in pip."""
    venv = tmp_path / 'env' / '.venv'
    result = _install_needing_a_pebibyte(venv)
    assert result.returncode == 1
    assert 'not enough disk' in result.stdout and 'MiB free' in result.stdout
    assert not (tmp_path / 'env').exists()


def test_install_counts_what_an_unfinished_environment_holds(tmp_path):
    """An environment left half-installed needs only the rest."""
    venv = tmp_path / '.venv'
    venv.mkdir()
    (venv / 'part').write_bytes(bytes(8 << 20))
    result = _install_needing_a_pebibyte(venv)
    assert result.returncode == 1
    more = int(re.search(r'needs about (\d+) MiB more', result.stdout).group(1))
    assert 2**50 - 10 < more <= 2**50 - 8                   # 2**40 GiB less the 8 MiB held
    assert sorted(p.name for p in venv.iterdir()) == ['part']

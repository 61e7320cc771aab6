"""AlignResize: the PVT-family segmentation releases' test-time resize (keep
the ratio, then stretch each side up to a multiple of 32)."""
import mmcv
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import TRANSFORMS

from vattn_mm.engine import AlignResize

from ..project.test_configs import ROOT


def test_align_resize_stretches_to_multiples_of_the_divisor():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (97, 131, 3), dtype=np.uint8)
    seg = rng.integers(0, 150, (97, 131), dtype=np.uint8)
    out = AlignResize(scale=(2048, 512), keep_ratio=True)(dict(img=img, gt_seg_map=seg))
    rescaled = mmcv.imrescale(img, (2048, 512))
    assert rescaled.shape[:2] == (512, 691)          # keep-ratio: 691 is no multiple of 32
    assert out['img'].shape[:2] == out['gt_seg_map'].shape == out['img_shape'] == (512, 704)
    np.testing.assert_array_equal(out['img'], mmcv.imresize(rescaled, (704, 512)))
    np.testing.assert_array_equal(out['gt_seg_map'], mmcv.imresize(
        mmcv.imrescale(seg, (2048, 512), interpolation='nearest'), (704, 512),
        interpolation='nearest'))
    assert out['scale_factor'] == pytest.approx((704 / 131, 512 / 97))
    # already aligned: the plain resize
    square = AlignResize(scale=(2048, 512), keep_ratio=True)(dict(img=img[:64, :64]))
    assert square['img'].shape[:2] == (512, 512) and square['scale_factor'] == (8., 8.)


def test_align_resize_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match='size_divisor must be a positive int'):
        AlignResize(scale=(2048, 512), size_divisor=0)
    with pytest.raises(ValueError, match="hold 'gt_bboxes': use Resize"):
        AlignResize(scale=(64, 64))(dict(img=np.zeros((8, 8, 3), np.uint8),
                                         gt_bboxes=np.zeros((1, 4), np.float32)))


def test_configs_name_it_in_their_test_pipeline():
    cfg = Config.fromfile(ROOT / 'configs' / '_base_' / 'fpn_ade20k_80k.py')
    step = TRANSFORMS.build(cfg.align_resize_test_pipeline[1])
    assert isinstance(step, AlignResize) and step.size_divisor == 32 and step.keep_ratio
    assert 'size_divisor=32' in repr(step)

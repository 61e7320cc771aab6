"""PVTv2-specific behaviour; the contract every backbone follows (golden
fixtures, key lists, checkpoints, freezing, sizes) is in test_backbones.py."""
import pytest
import torch

from vattn_mm.backbones import CheckpointMismatchError, PVTv2

from ..golden import case_paths, load_fixture, official_arch, write_released


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = load_fixture(case_paths('pvtv2')[0])     # micro_li: linear SRA
    path = write_released(rec, tmp_path)
    arch = dict(official_arch(rec), linear=False)  # conv SR: other keys/shapes
    model = PVTv2(arch=arch, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='mis-shaped keys.*attn.sr.weight'):
        model.init_weights()
    model = PVTv2('b0', init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='missing keys'):
        model.init_weights()


@pytest.mark.needs('mmdet')
def test_not_mmdets_pvtv2():
    from mmdet.registry import MODELS as DET
    assert DET.get('PyramidVisionTransformerV2') is not PVTv2


@pytest.mark.parametrize('size', [(64, 64), (100, 150), (33, 47)])
def test_output_sizes_are_ceil_halvings(size):
    model = PVTv2('b0').eval()
    outs = model(torch.randn(1, 3, *size))
    h, w = size
    for i, o in enumerate(outs):
        h, w = (h + 3) // 4 if i == 0 else (h + 1) // 2, (w + 3) // 4 if i == 0 else (w + 1) // 2
        assert o.shape[2:] == (h, w)


def test_conv_stem_and_norm_eval():
    model = PVTv2('b0', frozen_stages=2, norm_eval=True,
                  stem=dict(type='ConvStem', hidden_dims=(16, 32)))
    model.train()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns)
    outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [32, 64, 160, 256]

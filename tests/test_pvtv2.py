import pytest
import torch
from contract import (check_official_roundtrip_and_detector_checkpoint,
                      check_registry_scopes, check_with_cp_same_gradients)
from golden import (case_paths, check_released_keys, official_arch, run_golden_case,
                    write_released, load_case)

from vattn_mm.backbones import PVTv2
from vattn_mm.checkpoint import PVTV2_CONVERTER, CheckpointMismatchError


def build_from_case(rec, ckpt):
    return PVTv2(arch=official_arch(rec), drop_path_rate=0.,
                 init_cfg=dict(type='Pretrained', checkpoint=ckpt))


@pytest.mark.parametrize('path', case_paths('pvtv2'), ids=lambda p: p.stem)
def test_golden(path, tmp_path):
    run_golden_case(path, build_from_case, tmp_path)


@pytest.mark.parametrize('arch', sorted(PVTv2.arch_zoo))
def test_released_key_lists(arch):
    with torch.device('meta'):
        model = PVTv2(arch)
    check_released_keys(f'pvtv2_{arch}', model, PVTV2_CONVERTER)


@pytest.mark.parametrize('wrapper', [None, 'model', 'state_dict'])
def test_wrappers_and_module_prefix(wrapper, tmp_path):
    rec = load_case(case_paths('pvtv2')[0])
    sd = {'module.' + k: v for k, v in rec['checkpoint'].items()}
    path = tmp_path / 'ck.pth'
    torch.save(sd if wrapper is None else {wrapper: sd}, path)
    model = build_from_case(rec, str(path))
    model.init_weights()
    for k, v in PVTV2_CONVERTER.official_to_ours(rec['checkpoint']).items():
        assert torch.equal(model.state_dict()[k], v), k


def test_wrong_checkpoint_raises_naming_keys(tmp_path):
    rec = load_case(case_paths('pvtv2')[0])     # micro_li: linear SRA
    path = write_released(rec, tmp_path)
    arch = dict(official_arch(rec), linear=False)  # conv SR: other keys/shapes
    model = PVTv2(arch=arch, init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='mis-shaped keys.*attn.sr.weight'):
        model.init_weights()
    model = PVTv2('b0', init_cfg=dict(type='Pretrained', checkpoint=path))
    with pytest.raises(CheckpointMismatchError, match='missing keys'):
        model.init_weights()


def test_ours_roundtrip_and_detector_prefix(tmp_path):
    check_official_roundtrip_and_detector_checkpoint(
        PVTv2, dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                    depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1]), PVTV2_CONVERTER, tmp_path)


def test_registry_scopes():
    from mmdet.registry import MODELS as DET
    check_registry_scopes('PVTv2', 'b0')
    assert DET.get('PyramidVisionTransformerV2') is not PVTv2


def test_bad_arch_and_args():
    with pytest.raises(ValueError, match="unknown arch 'b9'"):
        PVTv2('b9')
    with pytest.raises(ValueError, match='missing keys'):
        PVTv2(dict(embed_dims=[8, 16, 24, 32]))
    with pytest.raises(ValueError, match="unknown keys \\['foo'\\]"):
        PVTv2(dict(PVTv2.arch_zoo['b0'], foo=1))
    with pytest.raises(ValueError, match='out_indices'):
        PVTv2('b0', out_indices=(4, ))


@pytest.mark.parametrize('size', [(64, 64), (100, 150), (33, 47)])
def test_any_input_size(size):
    model = PVTv2('b0').eval()
    outs = model(torch.randn(1, 3, *size))
    h, w = size
    for i, o in enumerate(outs):
        h, w = (h + 3) // 4 if i == 0 else (h + 1) // 2, (w + 3) // 4 if i == 0 else (w + 1) // 2
        assert o.shape[2:] == (h, w)


def test_frozen_stages_norm_eval_and_conv_stem():
    model = PVTv2('b0', frozen_stages=2, norm_eval=True,
                  stem=dict(type='ConvStem', hidden_dims=(16, 32)))
    model.train()
    assert not any(p.requires_grad for p in model.stages[:2].parameters())
    assert all(p.requires_grad for p in model.stages[2:].parameters())
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns)
    outs = model(torch.randn(2, 3, 64, 64))
    assert [o.shape[1] for o in outs] == [32, 64, 160, 256]


def test_with_cp_same_gradients():
    check_with_cp_same_gradients(PVTv2, 'b0')



"""The backbone contract, checked for every registered backbone: registry
scopes, golden fixtures of the official code, released key lists, checkpoint
wrappers and round trips, activation checkpointing, freezing, out_indices,
odd input sizes and bad arches."""
from pathlib import Path

import pytest
import torch

from vattn_mm.backbones import CheckArchs, backbone_class, released_families

from ..backbone_cases import CASES, REGISTERED, build_micro, key_list
from ..contract import (check_official_roundtrip_and_detector_checkpoint,
                       check_registry_scopes, check_with_cp_same_gradients)
from ..golden import (GOLDEN, case_paths, check_released_keys, load_fixture, official_arch,
                     run_golden_case)

#: the fixture ``arch`` entry that is a constructor argument, not an arch key
NOT_ARCH = ('out_indices', )
RELEASED = sorted(cls.__name__ for cls in released_families().values())
GOLDEN_CASES = [(name, path) for name in RELEASED
                for path in case_paths(backbone_class(name).family())]
KEY_LISTS = [(name, arch) for name in RELEASED for arch in sorted(backbone_class(name).arch_zoo)]


def build_from_case(rec: dict, checkpoint: str) -> torch.nn.Module:
    """The fixture's backbone, loading the official checkpoint ``checkpoint``."""
    cls = backbone_class(rec['family'])
    extra = {'out_indices': rec['arch']['out_indices']} if 'out_indices' in rec['arch'] else {}
    return cls(arch=official_arch(rec, drop=NOT_ARCH), drop_path_rate=0.,
               init_cfg=dict(type='Pretrained', checkpoint=checkpoint), **extra)


def test_every_released_family_has_golden_cases():
    assert {name for name, _ in GOLDEN_CASES} == set(RELEASED)


@pytest.mark.parametrize('name', REGISTERED)
def test_declares_its_check_archs(name):
    """Every registered backbone declares its own (not an inherited) micro
    arch, which builds, and a named arch for the GPU check."""
    cls = backbone_class(name)
    archs = vars(cls).get('check_archs')
    assert isinstance(archs, CheckArchs), f'{name} declares no check_archs'
    assert archs.representative in cls.arch_zoo, archs.representative
    with torch.device('meta'):
        cls(archs.micro, **archs.micro_kwargs)


def test_family_lookup():
    """By family or class name, any case; ``released``: only the families
    with official releases, an unknown name naming the known families."""
    assert backbone_class('agent_pvt') is backbone_class('AgentPVT') is backbone_class('agentpvt')
    assert backbone_class('TokenPyramid').converter is None
    with pytest.raises(ValueError, match=r"unknown released backbone family 'TokenPyramid'; "
                                         r"choose one of \['agent_pvt', "):
        backbone_class('TokenPyramid', released=True)
    with pytest.raises(ValueError, match=r"unknown backbone family 'Swin'; choose one of .*"
                                         r"'tokenpyramid'\]"):
        backbone_class('Swin')


@pytest.mark.parametrize('name,path', GOLDEN_CASES, ids=lambda v: getattr(v, 'stem', v))
def test_golden(name, path, tmp_path):
    """Loading the official checkpoint gives the official outputs to 1e-4."""
    run_golden_case(path, build_from_case, tmp_path)


@pytest.mark.parametrize('name,arch', KEY_LISTS)
def test_released_key_lists(name, arch):
    with torch.device('meta'):
        model = backbone_class(name)(arch)
    check_released_keys(key_list(name, arch), model, model.converter)


@pytest.mark.parametrize('name', RELEASED)
@pytest.mark.parametrize('wrapper', [None, 'model', 'state_dict'])
def test_release_wrappers_and_ddp_prefix(name, wrapper, tmp_path):
    rec = load_fixture(case_paths(backbone_class(name).family())[0])
    sd = {'module.' + k: v for k, v in rec['checkpoint'].items()}
    path = tmp_path / 'ck.pth'
    torch.save(sd if wrapper is None else {wrapper: sd}, path)
    model = build_from_case(rec, str(path))
    model.init_weights()
    rec_sd, _ = model.converter.match(dict(rec['checkpoint']), model.state_dict())
    for key, value in model.state_dict().items():
        if key in rec_sd:
            assert torch.equal(value, rec_sd[key]), key


@pytest.mark.parametrize('name', REGISTERED)
@pytest.mark.needs('mmdet', 'mmseg', 'mmpretrain')
def test_registry_scopes(name):
    check_registry_scopes(name, CASES[name].micro, CASES[name].micro_size)


@pytest.mark.parametrize('name', REGISTERED)
def test_official_roundtrip_and_detector_checkpoint(name, tmp_path):
    cls, case = backbone_class(name), CASES[name]
    check_official_roundtrip_and_detector_checkpoint(
        cls, case.micro, cls.checkpoint_converter(), tmp_path, case.micro_size, **case.micro_kwargs)


@pytest.mark.parametrize('name', REGISTERED)
def test_with_cp_same_gradients(name):
    case = CASES[name]
    check_with_cp_same_gradients(backbone_class(name), case.micro, case.micro_size,
                                 **case.micro_kwargs)


@pytest.mark.parametrize('name', REGISTERED)
def test_frozen_stages_norm_eval_out_indices(name):
    model = build_micro(name, frozen_stages=2, norm_eval=True, out_indices=(1, 3))
    model.train()
    assert not any(p.requires_grad for p in model.stages[:2].parameters())
    assert all(p.requires_grad for p in model.stages[2:].parameters())
    assert not model.stages[0].training and not model.stages[1].training
    assert model.stages[2].training
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert not any(m.training for m in norms)
    outs = model(torch.randn(2, 3, *CASES[name].micro_size))
    assert [o.shape[1] for o in outs] == [model.out_channels[1], model.out_channels[3]]
    with pytest.raises(ValueError, match='out_indices'):
        build_micro(name, out_indices=(4, ))
    with pytest.raises(ValueError, match='frozen_stages'):
        build_micro(name, frozen_stages=5)


@pytest.mark.parametrize('name', REGISTERED)
@pytest.mark.parametrize('size', [(64, 64), (100, 150), (67, 45)])
def test_odd_input_sizes(name, size):
    """Every size works: four maps of the stage channels, about
    ``side / stride`` large (each family's rounding: its own tests)."""
    model = build_micro(name).eval()
    with torch.no_grad():
        outs = model(torch.randn(1, 3, *size))
    assert [o.shape[1] for o in outs] == model.out_channels
    for i, o in enumerate(outs):
        stride = 4 * 2 ** i
        for got, side in zip(o.shape[2:], size):
            assert abs(got - side / stride) < 1, (i, tuple(o.shape), size)
        assert torch.isfinite(o).all()


@pytest.mark.parametrize('name', REGISTERED)
def test_bad_arch_is_a_clear_error(name):
    cls = backbone_class(name)
    with pytest.raises(ValueError, match=r"unknown arch 'nope'; choose one of"):
        cls('nope')
    with pytest.raises(ValueError, match='missing keys'):
        cls(dict(depths=[1, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"unknown keys \['foo'\]"):
        cls(dict(CASES[name].micro, foo=1))
    with pytest.raises(TypeError, match='arch must be a name or a dict'):
        cls(3)


@pytest.mark.parametrize('name', REGISTERED)
def test_out_channels_are_the_stage_widths(name):
    """``out_channels``: the channels of the tokens each stage's blocks run on."""
    model = build_micro(name).eval()
    widths = []
    for stage in model.stages:
        stage.blocks[0].register_forward_pre_hook(
            lambda module, args: widths.append(args[0].shape[-1]))
    with torch.no_grad():
        model(torch.randn(1, 3, *CASES[name].micro_size))
    assert model.out_channels == widths


def test_fixture_folders_are_the_released_families():
    folders = {p.name for p in GOLDEN.iterdir()
               if p.is_dir() and p.name not in ('keys', 'mixers')}   # mixers: one module each
    assert folders == {backbone_class(n).family() for n in RELEASED}, folders
    assert Path(GOLDEN / 'keys').is_dir()

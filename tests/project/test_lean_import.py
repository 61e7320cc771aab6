"""``import vattn_mm`` needs torch alone for the model code (layers,
backbones, checkpoint conversion, the timm models); where mmengine is
installed it needs mmcv too (with or without mmcv's compiled ops), and mmdet,
mmseg, mmpretrain and torchvision are imported by what uses them, a missing
one an error naming the extra that installs it (vattn_mm/utils/requires.py)."""
import subprocess
import sys
import types

import mmcv
import pytest
import torch
from mmengine.registry import MODELS

from vattn_mm.utils import requires
from vattn_mm.utils.requires import MissingPackageError, check_stack, require

from ..engine.test_training import ROOT

#: what importing vattn_mm must not import (each costs 0.3-2 s, or needs mmcv's ops; timm
#: only for ``import vattn_mm.timm``)
HEAVY = ('mmdet', 'mmseg', 'mmpretrain', 'torchvision', 'mmcv.ops', 'torch._dynamo',
         'torch._inductor', 'timm')


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_import_adds_only_its_own_modules_to_torch_mmengine_and_mmcv_cnn():
    out = _python(
        'import sys, torch, mmengine.model, mmcv.cnn\n'
        'base = set(sys.modules)\n'
        'import vattn_mm\n'
        f'heavy = {HEAVY!r}\n'
        'print(sorted(m for m in set(sys.modules) - base\n'
        '             if any(m == h or m.startswith(h + ".") for h in heavy)))')
    assert out == '[]'


#: what a timm user's environment lacks: OpenMMLab, and what mmengine and mmcv bring
OPENMMLAB = ('mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain', 'cv2', 'matplotlib')


#: how the child process builds PVTv2-b0 from ``ckpt`` (a vattn-mm checkpoint) with torch alone
TORCH_ONLY_BUILDS = {
    'backbone': 'from vattn_mm.backbones import build_backbone, load_pretrained\n'
                "model = build_backbone('pvtv2', 'b0', drop_path_rate=0.1)\n"
                'load_pretrained(model, ckpt, model.checkpoint_converter())\n',
    'timm': 'import timm, vattn_mm.timm\n'
            "model = timm.create_model('vattn_pvtv2_b0', features_only=True, pretrained=True,\n"
            '                          pretrained_cfg_overlay=dict(file=ckpt))\n',
}
#: ... and what it blocks
TORCH_ONLY_BLOCKS = {'backbone': OPENMMLAB + ('numpy', 'yaml'), 'timm': OPENMMLAB}


@pytest.mark.parametrize('build', sorted(TORCH_ONLY_BUILDS))
def test_the_model_code_runs_with_torch_alone(build, tmp_path):
    """With OpenMMLab, OpenCV and matplotlib blocked, the package imports, a
    backbone (or the timm features model) loads a vattn-mm checkpoint through
    the project's loader and gives exactly the maps and input gradient of the
    MMEngine backbone with those weights."""
    if build == 'timm':
        pytest.importorskip('timm')
    torch.manual_seed(0)
    net = MODELS.build(dict(type='PVTv2', arch='b0', drop_path_rate=0.1)).eval()
    x = torch.randn(1, 3, 97, 131, requires_grad=True)
    torch.save(net.state_dict(), tmp_path / 'b0.pth')
    torch.save(x.detach(), tmp_path / 'x.pt')
    maps = net(x)
    sum(m.square().sum() for m in maps).backward()
    out = _python(
        'import sys\n'
        f'for name in {TORCH_ONLY_BLOCKS[build]!r}:\n'
        '    sys.modules[name] = None\n'
        'import torch\n'
        f"ckpt = {str(tmp_path / 'b0.pth')!r}\n"
        + TORCH_ONLY_BUILDS[build] +
        f"x = torch.load({str(tmp_path / 'x.pt')!r}).requires_grad_()\n"
        'maps = model.eval()(x)\n'
        'sum(m.square().sum() for m in maps).backward()\n'
        f"torch.save([m.detach() for m in maps] + [x.grad], {str(tmp_path / 'out.pt')!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith('vattn_mm.') and\n"
        "             m.split('.')[1] in ('engine', 'heads', 'apis')))")
    assert out == '[]', out
    *theirs, grad = torch.load(tmp_path / 'out.pt')
    assert len(theirs) == 4 and all(torch.equal(a, b) for a, b in zip(maps, theirs))
    assert torch.equal(grad, x.grad)


def test_backbones_train_without_mmdet_mmseg_mmpretrain_and_mmcv_ops():
    """With those blocked: the package imports, a backbone builds from the
    registry and trains a step, EAHead's name is registered and building it
    says which extra to install."""
    out = _python(
        'import sys\n'
        "for name in ('mmdet', 'mmseg', 'mmpretrain', 'mmcv.ops'):\n"
        '    sys.modules[name] = None\n'
        'import torch, vattn_mm\n'
        'from mmengine.registry import MODELS\n'
        "net = MODELS.build(dict(type='PVTv2', arch='b0'))\n"
        'sum(o.mean() for o in net(torch.randn(1, 3, 64, 64))).backward()\n'
        "assert 'EAHead' in MODELS.module_dict\n"
        'try:\n'
        "    MODELS.build(dict(type='EAHead', in_channels=8, channels=8, num_classes=2))\n"
        'except ImportError as err:\n'
        '    print(err)\n')
    assert out.startswith('EAHead needs mmsegmentation'), out
    assert "pip install 'vattn-mm[seg]'" in out


@pytest.mark.needs('mmseg')
def test_ea_head_builds_through_its_registered_name():
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmseg'):   # its losses are mmseg's, whatever ran before
        head = MODELS.build(dict(type='EAHead', in_channels=8, channels=8, ea_channels=8,
                                 num_classes=2))
    from vattn_mm.heads import EAHead
    assert type(head) is EAHead


def test_missing_codebase_names_its_extra():
    with pytest.raises(MissingPackageError, match=r"mmdet \(mmdet\.no_such_module does not "
                                                  r"import: .*`pip install 'vattn-mm\[det\]'`"):
        require('mmdet.no_such_module', 'this test')


def test_missing_mmcv_ops_is_named(monkeypatch):
    """mmdet installed, mmcv without its compiled ops (mmcv-lite)."""
    def fail(name):
        if name == 'mmdet':
            return types.ModuleType('mmdet')
        err = ImportError('No module named mmcv._ext')
        err.name = 'mmcv._ext'
        raise err
    monkeypatch.setattr(requires.importlib, 'import_module', fail)
    with pytest.raises(MissingPackageError, match=r"needs mmdet, which needs mmcv's compiled "
                                                  r'ops \(mmcv\.ops\), and this mmcv has none'):
        require('mmdet.models', 'this config')


@pytest.mark.parametrize('module,version,message', [
    (mmcv, '2.2.0', r'vattn-mm needs mmcv >= 2\.0, < 2\.2, found 2\.2\.0'),
    (mmcv, '1.7.2', r'vattn-mm needs mmcv >= 2\.0, < 2\.2, found 1\.7\.2'),
    (None, '0.9.0', r'vattn-mm needs mmengine >= 0\.10, < 1\.0, found 0\.9\.0'),
])
def test_unsupported_versions_are_named_at_import(monkeypatch, module, version, message):
    if module is None:
        import mmengine as module
    monkeypatch.setattr(module, '__version__', version)
    with pytest.raises(ImportError, match=message):
        check_stack()


def test_an_old_torch_is_named(monkeypatch):
    monkeypatch.setattr(requires, 'TORCH_VERSION', (2, 0))
    monkeypatch.setitem(sys.modules, 'torch', types.SimpleNamespace(__version__='2.0.1'))
    with pytest.raises(ImportError, match=r'vattn-mm needs torch >= 2\.1, found 2\.0\.1'):
        check_stack()

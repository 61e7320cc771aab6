"""``import vattn_mm`` (what ``custom_imports=['vattn_mm']`` does) only adds
names: torch, mmengine, mmcv, mmdet, mmseg and mmpretrain keep every object,
registry entry, file backend, checkpoint scheme and torch safe global they
had.  The protections are switched on by what a config names
(configs/_base_/vattn_runtime.py), and a user's own mmdet ``tools/train.py``
gets them from the config alone."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from .test_training import ROOT, data_options, without_module_list

from vattn_mm.datasets import make_demo_dataset
from vattn_mm.utils import TRUST_ENV, EmptyDatasetError, ImageLoadError, float32_mmcv_ops
from vattn_mm.utils.atomic_io import TMP_PREFIX
from vattn_mm.utils.protections import RUNTIME_FRAGMENT, use_protections
from vattn_mm.utils.safe_load import plain_message_hub, restore_message_hub

#: slow (fresh interpreters and mmdet's own train.py)
pytestmark = pytest.mark.slow

#: runs in a fresh interpreter: snapshot, ``import vattn_mm``, snapshot, compare
PROBE = r'''
import importlib, json, sys
import torch
from mmengine.fileio.backends import registry_utils
from mmengine.registry import Registry
from mmengine.runner.checkpoint import CheckpointLoader
import mmengine.registry

# what a training process has imported before custom_imports run
for package in ('mmdet', 'mmseg', 'mmpretrain'):
    for part in ('datasets', 'engine', 'evaluation', 'models', 'visualization'):
        importlib.import_module(f'{package}.{part}')
importlib.import_module('mmcv.ops')
FRAMEWORKS = {'torch', 'mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain'}


def objects():
    """(module, name[, class attribute]) -> object, for every module of the
    frameworks and every class they define."""
    found = {}
    for modname, module in list(sys.modules.items()):
        if modname.split('.')[0] not in FRAMEWORKS or module is None:
            continue
        for name, value in list(getattr(module, '__dict__', {}).items()):
            found[(modname, name)] = value
            if isinstance(value, type) and value.__module__ == modname:
                for attr, member in list(vars(value).items()):
                    found[(modname, name, attr)] = member
    return found


def registries():
    roots = [r for r in vars(mmengine.registry).values() if isinstance(r, Registry)]
    found, todo = {}, list(roots)
    while todo:
        registry = todo.pop()
        found[f'{registry.scope}.{registry.name}'] = dict(registry.module_dict)
        todo += registry._children.values()
    return found


def tables():
    return {'file backends': dict(registry_utils.backends),
            'file backend prefixes': dict(registry_utils.prefix_to_backends),
            'checkpoint schemes': dict(CheckpointLoader._schemes),
            'torch safe globals': {repr(g): g for g in torch.serialization.get_safe_globals()}}


def changed(before, after):
    """Names whose object is not the same one any more (new names are fine)."""
    return sorted(str(k) for k in before if k not in after or after[k] is not before[k])


objs, regs, tabs = objects(), registries(), tables()
import vattn_mm  # noqa: E402
regs_after, tabs_after = registries(), tables()
report = {'objects': changed(objs, objects())}
report.update({f'registry {k}': changed(v, regs_after.get(k, {})) for k, v in regs.items()})
report.update({k: changed(v, tabs_after[k]) for k, v in tabs.items()})
# neither torch's allow-list nor how mmengine resolves a path or checkpoint may grow
for key in ('torch safe globals', 'file backend prefixes', 'checkpoint schemes'):
    report[key] += sorted(set(tabs_after[key]) - set(tabs[key]))
print('REPORT ' + json.dumps({k: v for k, v in report.items() if v}))
print('IMPORTED ' + json.dumps(vattn_mm.__file__))
print('NEW_RUNNERS ' + json.dumps(sorted(set(regs_after['mmengine.runner'])
                                         - set(regs['mmengine.runner']))))
'''


def test_import_changes_nothing_that_exists():
    proc = subprocess.run([sys.executable, '-c', PROBE], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 0, without_module_list(proc.stderr)[-5000:]
    lines = dict(line.split(' ', 1) for line in proc.stdout.splitlines()
                 if line.startswith(('REPORT ', 'IMPORTED ', 'NEW_RUNNERS ')))
    assert json.loads(lines['IMPORTED']).startswith(str(ROOT)), lines['IMPORTED']
    report = json.loads(lines['REPORT'])
    assert not report, 'import vattn_mm changed what exists:\n' + json.dumps(report, indent=1)
    assert json.loads(lines['NEW_RUNNERS']) == ['SafeFlexibleRunner', 'SafeRunner']  # registering still happens


def test_tools_add_the_runtime_fragment_to_configs_without_it(tmp_path):
    """tools/train.py / tools/test.py give a config the fragment's entries it
    lacks, so that they hold for configs that do not inherit it; a config's
    own entries win."""
    runtime = Config.fromfile(RUNTIME_FRAGMENT, import_custom_modules=False)
    assert runtime.runner_type == 'SafeRunner' and runtime.float32_mmcv_ops is True
    bare = tmp_path / 'bare.py'
    bare.write_text("model = dict(type='Foo')\n")
    cfg = Config.fromfile(str(bare))
    assert sorted(use_protections(cfg)) == sorted(runtime.keys())
    assert all(cfg[key] == runtime[key] for key in runtime.keys())
    demo = Config.fromfile(str(ROOT / 'configs/demo/pvtv2_b0_upernet_demo.py'))
    assert use_protections(demo) == []
    assert all(demo[key] == runtime[key] for key in runtime.keys())
    own = tmp_path / 'own.py'
    own.write_text("runner_type = 'Runner'\n")
    cfg = Config.fromfile(str(own))
    assert 'runner_type' not in use_protections(cfg) and cfg.runner_type == 'Runner'


def test_float32_mmcv_ops_hold_only_inside_the_block():
    import importlib

    import mmcv.ops
    owners = [(mmcv.ops, 'nms'), (mmcv.ops, 'roi_align'),
              (importlib.import_module('mmcv.ops.nms'), 'nms'),
              (importlib.import_module('mmcv.ops.roi_align'), 'roi_align')]
    before = [getattr(owner, name) for owner, name in owners]
    with pytest.raises(RuntimeError, match='run failed'):
        with float32_mmcv_ops():
            assert all(getattr(getattr(o, n), '_vattn_float32', False) for o, n in owners)
            raise RuntimeError('run failed')
    assert all(getattr(o, n) is fn for (o, n), fn in zip(owners, before))


def test_checkpoint_message_hub_loads_without_an_allow_list(tmp_path):
    """mmengine pickles HistoryBuffer objects (refused by torch's weights-only
    loader); PlainMessageHubHook writes plain lists and restores them."""
    import pickle

    import numpy as np
    from mmengine.logging import HistoryBuffer, MessageHub
    hub = MessageHub.get_instance('test_plain_hub')
    for value in (1.0, 2.0, 4.0):
        hub.update_scalar('train/loss', value)
    hub.update_info('best_score', np.float64(0.5))
    torch.save({'message_hub': hub.state_dict()}, tmp_path / 'mmengine.pth')
    with pytest.raises(pickle.UnpicklingError, match='HistoryBuffer'):
        torch.load(tmp_path / 'mmengine.pth', weights_only=True)
    torch.save({'message_hub': plain_message_hub(hub.state_dict())}, tmp_path / 'plain.pth')
    loaded = torch.load(tmp_path / 'plain.pth', weights_only=True)
    state = restore_message_hub(loaded['message_hub'])
    resumed = MessageHub.get_instance('test_plain_hub_resumed')
    resumed.load_state_dict(state)
    loss = resumed.get_scalar('train/loss')
    assert isinstance(loss, HistoryBuffer) and loss.mean() == pytest.approx(7 / 3)
    assert resumed.get_info('best_score') == 0.5


def test_safe_runner_dataloaders_name_empty_datasets_and_undecodable_images(tmp_path):
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from vattn_mm.engine import SafeRunner
    init_default_scope('mmseg')
    for sub in ('images/training', 'annotations/training'):
        (tmp_path / sub).mkdir(parents=True)
    loader = dict(batch_size=1, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
                  dataset=dict(type='BaseSegDataset', data_root=str(tmp_path), img_suffix='.jpg',
                               seg_map_suffix='.png', pipeline=[dict(type='LoadImageFromFile')],
                               data_prefix=dict(img_path='images/training',
                                                seg_map_path='annotations/training')))
    with pytest.raises(ValueError, match='need at least one array'):  # mmengine on its own
        Runner.build_dataloader(loader)
    with pytest.raises(EmptyDatasetError, match="BaseSegDataset has no samples: .*data_root='"):
        SafeRunner.build_dataloader(loader)
    (tmp_path / 'images/training/a.jpg').write_bytes(b'')
    (tmp_path / 'annotations/training/a.png').write_bytes(b'')
    dataset = SafeRunner.build_dataloader(loader).dataset
    image = tmp_path / 'images/training/a.jpg'
    with pytest.raises(ImageLoadError, match=f"failed to load image '{image}'"):
        dataset[0]
    with pytest.raises(Exception) as plain:  # an untouched LoadImageFromFile, elsewhere
        Runner.build_dataloader(loader).dataset[0]
    assert not isinstance(plain.value, ImageLoadError)


def test_the_runners_config_is_formatted_once_for_each_content(monkeypatch, tmp_path):
    """mmengine's runner formats its config (yapf) when it logs it, dumps it,
    starts and writes each checkpoint; the safe runners' config formats it
    once, and again only after a change."""
    import copy

    from mmengine.config import config as config_module

    from vattn_mm.engine import SafeRunner
    from vattn_mm.engine.runner import RunConfig
    cfg = Config(dict(model=dict(type='ToyModel', depths=[2, 2]), work_dir=str(tmp_path)))
    expected = cfg.pretty_text
    formatted = []
    real = config_module.FormatCode
    monkeypatch.setattr(config_module, 'FormatCode',
                        lambda *args, **kwargs: formatted.append(1) or real(*args, **kwargs))
    run_cfg = copy.deepcopy(RunConfig.of(cfg))   # as Runner.__init__ keeps it
    assert [run_cfg.pretty_text for _ in range(3)] == [expected] * 3 and len(formatted) == 1
    assert run_cfg.to_dict() == cfg.to_dict() and run_cfg.filename == cfg.filename
    run_cfg.model.depths = [3, 3]
    assert run_cfg.pretty_text == run_cfg.pretty_text and len(formatted) == 2
    assert run_cfg.pretty_text == Config(run_cfg.to_dict()).pretty_text != expected
    runner = SafeRunner(model=torch.nn.Linear(2, 2), work_dir=str(tmp_path), cfg=cfg)
    assert isinstance(runner.cfg, RunConfig) and runner.cfg.pretty_text == expected


# ---------------------------------------------- the user's own mmdet train.py
DET_DEMO = ROOT / 'configs/demo/pvtv2_b0_maskrcnn_demo.py'


def mmdet_train_py() -> Path:
    import mmdet
    path = Path(mmdet.__file__).parent / '.mim' / 'tools' / 'train.py'
    if not path.is_file():
        pytest.fail(f'mmdet ships no {path}; the test needs mmdet installed with its tools')
    return path


def upstream_train(work: Path, root: Path, iters: int, *extra: str) -> subprocess.CompletedProcess:
    """mmdet's tools/train.py on the detection demo: no validation, a
    checkpoint every iteration, one kept."""
    opts = [o for o in data_options(root, str(DET_DEMO)) if o.startswith('train_')] + [
        f'train_cfg.max_iters={iters}', 'val_cfg=None', 'val_dataloader=None',
        'val_evaluator=None', 'default_hooks.checkpoint.interval=1',
        'default_hooks.checkpoint.max_keep_ckpts=1', 'default_hooks.logger.interval=1',
        'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False']
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    env.pop(TRUST_ENV, None)
    return subprocess.run([sys.executable, str(mmdet_train_py()), str(DET_DEMO), '--work-dir',
                           str(work), *extra, '--cfg-options', *opts],
                          cwd=work.parent, env=env, capture_output=True, text=True, timeout=600)


class Payload:
    """Unpickling it would run code: it touches a marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_mmdet_train_py_trains_resumes_and_refuses_untrusted_pickles(tmp_path):
    root = make_demo_dataset(tmp_path / 'demo', num_train=4, num_val=2, size=64)
    work = tmp_path / 'work'
    first = upstream_train(work, root, 2)
    log = without_module_list(first.stdout + first.stderr)
    assert first.returncode == 0, log[-6000:]
    for hook in ('CrashSafeCheckpointHook', 'PlainMessageHubHook', 'RandomStateHook',
                 'FiniteLossHook'):
        assert hook in log, f'{hook} missing:\n{log[-3000:]}'
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_2.pth']  # rotated after saving
    assert not list(work.glob(f'{TMP_PREFIX}*'))
    ckpt = torch.load(work / 'iter_2.pth', weights_only=True)  # no allow-list needed
    assert isinstance(ckpt['message_hub']['log_scalars']['train/loss'], dict)
    assert ckpt['random_state']['iter'] == 2 and ckpt['random_state']['world_size'] == 1

    resumed = upstream_train(work, root, 3, '--resume')
    log = without_module_list(resumed.stdout + resumed.stderr)
    assert resumed.returncode == 0, log[-6000:]
    assert 'resumed epoch: 0, iter: 2' in log and 'Iter(train) [3/3]' in log, log[-3000:]
    assert 'Random-number state of iteration 2 restored' in log, log[-3000:]
    assert (work / 'iter_3.pth').is_file()

    marker = tmp_path / 'code_ran'
    payload = tmp_path / 'payload.pth'
    torch.save(dict(ckpt, extra=Payload(str(marker))), payload)
    refused = upstream_train(tmp_path / 'refused', root, 3, '--resume', str(payload))
    assert refused.returncode != 0
    error = without_module_list(refused.stderr)
    assert 'UntrustedCheckpointError' in error and '--trust-checkpoint' in error, error[-3000:]
    assert not marker.exists(), 'an untrusted checkpoint ran code'

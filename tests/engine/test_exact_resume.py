"""Exact resume and the invalid-loss guard, through tools/train.py on the CPU.

A run killed with SIGKILL between two checkpoints and resumed with
``--resume`` ends with the weights of the uninterrupted run, every tensor
``torch.equal``: Mask R-CNN and RetinaNet (mmdet), UperNet (mmseg) and an
ImageClassifier (mmpretrain), each with random flips / crops and drop path,
with 0 and 2 data-loader workers, and a 2-process run
(:class:`~vattn_mm.engine.RandomStateHook`).  A NaN loss stops the run naming
the iteration and the loss terms, and leaves the last good checkpoint the
latest (:class:`~vattn_mm.engine.FiniteLossHook`).
"""
import math
import os
import re
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mmengine.config import Config
from mmengine.logging import MessageHub
from ..conftest import FULL_STACK_ENV, missing
from .test_reliability import (ROOT, dist_cmd, finish, logged_train_iters, start, tiny_seg_config,
                               train_cmd, weights)

from vattn_mm.datasets import make_demo_dataset
from vattn_mm.utils.atomic_io import TMP_PREFIX
from vattn_mm.utils.compat import TORCH_VERSION, grad_scaler
from vattn_mm.engine import (CrashSafeCheckpointHook, FiniteLossHook, NonFiniteLossError,
                             NonFiniteWeightsError, RandomStateHook, capture_random_state,
                             restore_random_state)

#: slow (kill -9 and resume of real training runs, 1 and 2 processes)
#: one xdist worker runs the modules that start torchrun jobs, one module at a time
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('torchrun')]

DET_DEMO = ROOT / 'configs/demo/pvtv2_b0_maskrcnn_demo.py'
CLS_DEMO = ROOT / 'configs/demo/pvtv2_b0_cls_demo.py'
MAX_ITERS = 5
#: every case: checkpoints at iterations 2 and 4, random augmentations, drop path
COMMON = """
custom_imports = dict(imports=['vattn_mm', 'tests.fault_hooks'], allow_failed_imports=False)
custom_hooks = [dict(type='FaultInjectionHook')]
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=2, max_keep_ckpts=2),
                     logger=dict(interval=1))
randomness = dict(seed=0, deterministic=True)
"""


@pytest.fixture(scope='module')
def demo64(tmp_path_factory):
    return make_demo_dataset(tmp_path_factory.mktemp('demo64'), num_train=8, num_val=2, size=64)


def loaders(workers: int, root: str, sampler: str = '') -> str:
    persistent = workers > 0
    return f"""
train_dataloader = dict(batch_size=2, num_workers={workers}, persistent_workers={persistent},
                        {sampler}dataset=dict(data_root='{root}', pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root='{root}'))
test_dataloader = val_dataloader
"""


DET_PIPELINE = """
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomResize', scale=(64, 64), ratio_range=(0.8, 1.2), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
"""


def maskrcnn_config(directory: Path, root: Path, workers: int) -> Path:
    coco = f'{root}/coco/'
    text = f"_base_ = ['{DET_DEMO}']\n" + COMMON + DET_PIPELINE + loaders(workers, coco) + f"""
model = dict(backbone=dict(drop_path_rate=0.1))
val_evaluator = dict(ann_file='{coco}annotations/instances_val.json')
test_evaluator = val_evaluator
train_cfg = dict(max_iters={MAX_ITERS}, val_interval={MAX_ITERS})
"""
    return _write(directory / 'maskrcnn.py', text)


def retinanet_config(directory: Path, root: Path, workers: int) -> Path:
    """RetinaNet (mmdet's model base) with the demo's backbone and data."""
    demo = Config.fromfile(DET_DEMO)
    import mmdet
    model = Config.fromfile(Path(mmdet.__file__).parent /
                            '.mim/configs/_base_/models/retinanet_r50_fpn.py').model
    model.backbone = dict(demo.model.backbone, drop_path_rate=0.1)
    model.neck.update(in_channels=demo.backbone_channels, out_channels=32)
    model.bbox_head.update(num_classes=4, in_channels=32, feat_channels=32, stacked_convs=1)
    coco = f'{root}/coco/'
    text = f"_base_ = ['{DET_DEMO}']\n" + COMMON + DET_PIPELINE + loaders(workers, coco) + f"""
model = dict(_delete_=True, **{model.to_dict()!r})
val_evaluator = dict(ann_file='{coco}annotations/instances_val.json', metric=['bbox'])
test_evaluator = val_evaluator
train_cfg = dict(max_iters={MAX_ITERS}, val_interval={MAX_ITERS})
"""
    return _write(directory / 'retinanet.py', text)


def upernet_config(directory: Path, root: Path, workers: int) -> Path:
    """The tiny UperNet of test_reliability with drop path and a validation
    at every checkpoint (validation must not move the training generators)."""
    base = tiny_seg_config(directory, root, flip_prob=0.5)
    text = f"_base_ = ['{base}']\n" + COMMON + f"""
model = dict(backbone=dict(drop_path_rate=0.1))
train_dataloader = dict(batch_size=2, num_workers={workers}, persistent_workers={workers > 0})
train_cfg = dict(max_iters={MAX_ITERS}, val_interval=2)
"""
    return _write(directory / 'upernet.py', text)


def classifier_config(directory: Path, root: Path, workers: int) -> Path:
    """The ImageClassifier demo as an iteration-based run (random resized
    crops, flips, drop path)."""
    text = f"_base_ = ['{CLS_DEMO}']\n" + COMMON + """
model = dict(backbone=dict(drop_path_rate=0.1))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.6, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
""" + loaders(workers, f'{root}/cls', "sampler=dict(type='InfiniteSampler', shuffle=True),\n") + f"""
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={MAX_ITERS},
                 val_interval={MAX_ITERS})
param_scheduler = []
log_processor = dict(by_epoch=False)
"""
    return _write(directory / 'classifier.py', text)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants (torchrun starts its ranks
    in sessions of their own, out of reach of ``killpg``)."""
    tree, todo = [pid], [pid]
    while todo:
        for task in Path(f'/proc/{todo.pop()}/task').glob('*'):
            try:
                children = [int(c) for c in (task / 'children').read_text().split()]
            except OSError:
                continue
            tree += children
            todo += children
    for member in tree:
        try:
            os.kill(member, signal.SIGKILL)
        except ProcessLookupError:
            pass


class KillResumeJob:
    """Run A trains MAX_ITERS iterations; run B hangs before iteration
    ``kill_at`` (0-based), is SIGKILLed with its process group (data workers,
    the other rank) and resumed with ``--resume``.  :meth:`step` moves it on
    without blocking, so that every case runs at once."""

    slots = 0  # training processes of all jobs running now

    def __init__(self, config: Path, tmp: Path, kill_at: int, distributed: bool):
        self.config, self.tmp, self.kill_at, self.distributed = config, tmp, kill_at, distributed
        self.cmd = dist_cmd if distributed else train_cmd
        self.extra = ['--cfg-options', 'train_dataloader.batch_size=1'] if distributed else []
        self.work_a, self.work_b = tmp / 'a', tmp / 'b'
        self.procs, self.stage, self.error, self.at_kill = {}, 'queued', '', {}
        self.holding = False

    @property
    def size(self) -> int:
        return 4 if self.distributed else 2

    def _start(self, name: str, work: Path, *args: str, **env: str) -> None:
        log = self.tmp / f'{name}.log'
        self.procs[name] = (start(self.cmd(self.config, work, *args, *self.extra), log, **env), log)

    def step(self, limit: int) -> bool:
        """Advance; False once finished."""
        if self.stage == 'queued' and KillResumeJob.slots + self.size <= max(limit, self.size):
            KillResumeJob.slots += self.size
            self.holding = True
            self._start('a', self.work_a)
            self._start('b', self.work_b, VATTN_TEST_FAULT=f'hang:0:{self.kill_at}')
            self.stage = 'hanging'
        elif self.stage == 'hanging':
            proc, log = self.procs['b']
            if (self.work_b / 'fault_hang_rank0').exists():
                kill_tree(proc.pid)
                proc.wait()
                self.at_kill = dict(
                    last=(self.work_b / 'last_checkpoint').read_text(),
                    checkpoints=sorted(p.name for p in self.work_b.glob('*.pth')),
                    temporary=[p.name for p in self.work_b.glob(f'{TMP_PREFIX}*')])
                latest = Path(self.at_kill['last'])
                if latest.is_file():  # rotated away by the time the resumed run ends
                    saved = torch.load(latest, map_location='cpu', weights_only=True)
                    self.at_kill['random_state_ranks'] = len(saved['random_state']['ranks'])
                self._start('resume', self.work_b, '--resume')
                self.stage = 'resuming'
            elif proc.poll() is not None:
                self.error = f'run B ended before its hang:\n{log.read_text()[-3000:]}'
                self.stage = 'done'
        elif self.stage == 'resuming':
            if all(proc.poll() is not None for proc, _ in self.procs.values()):
                self.stage = 'done'
        if self.stage == 'done' and self.holding:
            KillResumeJob.slots -= self.size
            self.holding = False
        return self.stage != 'done'

    def kill(self) -> None:
        for proc, _ in self.procs.values():
            if proc.poll() is None:  # not reaped yet: the pid is still this run's
                kill_tree(proc.pid)
                proc.wait()


CASES = {  # name: (config, data-loader workers, iteration before which run B is killed, 2 ranks)
    'maskrcnn-2workers': (maskrcnn_config, 2, 3, False),
    'retinanet-0workers': (retinanet_config, 0, 3, False),
    'upernet-0workers': (upernet_config, 0, 3, False),
    'classifier-2workers': (classifier_config, 2, 4, False),
    'upernet-2processes': (upernet_config, 0, 3, True),
}
#: the codebase each case's model comes from (tests/conftest.py NEEDS)
CASE_NEEDS = {'maskrcnn-2workers': 'mmdet', 'retinanet-0workers': 'mmdet',
              'upernet-0workers': 'mmseg', 'classifier-2workers': 'mmpretrain',
              'upernet-2processes': 'mmseg'}
#: the cases ``make test`` leaves to ``make test-extended``: a second mmdet model; the
#: mmpretrain one, whose data-worker case maskrcnn-2workers repeats; the 1-process mmseg
#: one, which test_kill_during_save and test_preemption repeat (SIGKILL and SIGTERM to
#: the same UperNet, resumed exactly)
EXTENDED = ('retinanet-0workers', 'classifier-2workers', 'upernet-0workers')
#: training processes at once (each ~0.5 GB; most of a run is imports and waiting)
MAX_PROCESSES = 6


class Progress:
    """Hang guard of the jobs: progress is any log growing; what runs at once is
    bounded by MAX_PROCESSES, so however slow the machine, a healthy run
    writes a log line (imports, each iteration, each checkpoint) well within
    STALL seconds, while a wedged one writes none."""

    STALL = 600

    def __init__(self, jobs: dict):
        self.jobs, self.sizes, self.last = jobs, {}, time.monotonic()

    def stalled(self) -> str:
        sizes = {log: log.stat().st_size for job in self.jobs.values()
                 for _, log in job.procs.values() if log.exists()}
        if sizes != self.sizes:
            self.sizes, self.last = sizes, time.monotonic()
        elif time.monotonic() - self.last > self.STALL:
            return (f'no log grew for {self.STALL} s: ' +
                    ', '.join(f'{name} {job.stage}' for name, job in self.jobs.items()))
        return ''


@pytest.fixture(scope='module')
def resumed_runs(demo64, tmp_path_factory, request):
    jobs = {}
    selected = {item.callspec.params['case'] for item in request.session.items
                if getattr(item, 'originalname', '') == 'test_killed_and_resumed_run_ends_bit_identical'}
    for name, (make_config, workers, kill_at, distributed) in CASES.items():
        if name not in selected or not os.environ.get(FULL_STACK_ENV) and missing(CASE_NEEDS[name]):
            continue  # its test is deselected, or skipped (needs marker)
        tmp = tmp_path_factory.mktemp(name)
        jobs[name] = KillResumeJob(make_config(tmp, demo64, workers), tmp, kill_at, distributed)
    progress = Progress(jobs)
    try:
        while [job.step(MAX_PROCESSES) for job in jobs.values()].count(True):
            stalled = progress.stalled()
            if stalled:
                for job in jobs.values():
                    job.error = job.error or stalled
                break
            time.sleep(0.2)
        yield jobs
    finally:
        for job in jobs.values():
            job.kill()


@pytest.mark.parametrize('case', [
    pytest.param(c, marks=[pytest.mark.needs(CASE_NEEDS[c])] +
                 ([pytest.mark.extended] if c in EXTENDED else [])) for c in CASES])
def test_killed_and_resumed_run_ends_bit_identical(case, resumed_runs):
    """Every tensor of the final checkpoint of the killed-and-resumed run
    equals the uninterrupted run's (``torch.equal``)."""
    job = resumed_runs[case]
    assert not job.error, job.error
    resumed_from = 2 * (job.kill_at // 2)
    assert job.at_kill['last'].endswith(f'iter_{resumed_from}.pth')
    assert f'iter_{MAX_ITERS}.pth' not in job.at_kill['checkpoints']
    assert not job.at_kill['temporary'], 'a temporary checkpoint file was left behind'
    log = finish(*job.procs['resume'])
    finish(*job.procs['a'])
    assert job.at_kill.get('random_state_ranks') == (2 if job.distributed else 1)
    assert f'resumed epoch: 0, iter: {resumed_from}' in log
    assert f'Random-number state of iteration {resumed_from} restored' in log
    assert logged_train_iters(log) == list(range(resumed_from + 1, MAX_ITERS + 1)), log[-3000:]
    ref = weights(job.work_a / f'iter_{MAX_ITERS}.pth')
    got = weights(job.work_b / f'iter_{MAX_ITERS}.pth')
    assert ref.keys() == got.keys()
    unequal = [k for k in ref if not torch.equal(ref[k], got[k])]
    assert not unequal, (f'{len(unequal)} of {len(ref)} tensors differ, e.g. {unequal[:3]}; '
                         f'max |diff| {max((ref[k] - got[k]).abs().max().item() for k in unequal):.3g}')


@pytest.mark.needs('mmseg')
@pytest.mark.parametrize('ranks', [1, 2])
def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(demo64, tmp_path, ranks):
    """The NaN comes on the last rank; with two, both stop with one message."""
    config = upernet_config(tmp_path, demo64, workers=0)
    work = tmp_path / 'work'
    cmd = (dist_cmd if ranks > 1 else train_cmd)(
        config, work, '--cfg-options', f'train_cfg.val_interval={MAX_ITERS}',
        *(['train_dataloader.batch_size=1'] if ranks > 1 else []))
    run = start(cmd, tmp_path / 'nan.log', VATTN_TEST_FAULT=f'nan:{ranks - 1}:3')
    log = finish(run, tmp_path / 'nan.log', ok=False)
    assert run.returncode != 0
    where = ' on rank 1 of 2' if ranks > 1 else ''
    message = re.compile(
        r'NonFiniteLossError: Training stopped at iteration 4 \(of 5\): loss terms '
        rf'not finite{where}: decode\.loss_ce=nan, loss=nan\. The latest checkpoint is still '
        rf'{re.escape(str(work))}/iter_2\.pth')
    found = message.findall(log)   # each rank's, and torchrun's summary repeats them: all the same
    assert len(found) >= ranks and len(found) == log.count('NonFiniteLossError: Training'), log[-5000:]
    assert (work / 'last_checkpoint').read_text().endswith('iter_2.pth')
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_2.pth']
    assert all(torch.isfinite(t).all() for t in weights(work / 'iter_2.pth').values())


# ---------------------------------------------------------------- unit checks
class StubRunner(SimpleNamespace):
    def __init__(self, **kwargs):
        warnings = []
        logger = SimpleNamespace(warning=warnings.append, info=lambda msg: None)
        kwargs = dict(dict(iter=0, max_iters=8), **kwargs)
        super().__init__(logger=logger, warnings=warnings,
                         message_hub=MessageHub.get_instance(f'stub_{id(warnings)}'), **kwargs)


def test_random_state_round_trip_loads_weights_only(tmp_path):
    state = capture_random_state()
    torch.save({'random_state': state}, tmp_path / 'state.pth')
    expected = (torch.rand(3), __import__('numpy').random.rand(3).tolist(),
                __import__('random').random())
    restore_random_state(torch.load(tmp_path / 'state.pth', weights_only=True)['random_state'])
    again = (torch.rand(3), __import__('numpy').random.rand(3).tolist(),
             __import__('random').random())
    assert torch.equal(expected[0], again[0]) and expected[1:] == again[1:]


def test_resume_on_another_number_of_processes_names_what_is_not_exact():
    hook = RandomStateHook()
    loop = SimpleNamespace(dataloader=SimpleNamespace(batch_size=2))
    runner = StubRunner(_resume=True, train_loop=loop)
    saved = dict(world_size=2, iter=4, ranks=[capture_random_state()] * 2)
    hook.after_load_checkpoint(runner, {'meta': {'iter': 4}, 'random_state': saved})
    warning, = runner.warnings
    assert 'written by 2 processes, this run has 1' in warning
    assert 'optimizer and scheduler states and the iteration count continue exactly' in warning
    assert 'global batch is 2 samples, not the 4 it was' in warning
    assert hook._pending is None


def test_old_checkpoint_resumes_with_a_warning():
    hook, runner = RandomStateHook(), StubRunner(_resume=True)
    hook.after_load_checkpoint(runner, {'meta': {'iter': 4}, 'state_dict': {}})
    assert len(runner.warnings) == 1 and 'holds no random-number state' in runner.warnings[0]
    assert hook._pending is None
    hook.after_load_checkpoint(StubRunner(_resume=False), {'meta': {'iter': 4}})  # load_from


def test_checkpoint_hook_refuses_non_finite_weights(tmp_path):
    model = torch.nn.Linear(2, 2)
    hook = CrashSafeCheckpointHook(interval=1, by_epoch=False, max_keep_ckpts=1)
    runner = StubRunner(work_dir=str(tmp_path), model=model)
    hook.before_train(runner)
    with torch.no_grad():
        model.weight[0, 0] = math.inf
    with pytest.raises(NonFiniteWeightsError, match=r'iter_3\.pth not written.*\bweight\b'):
        hook._save_checkpoint_with_step(runner, 3, {})
    assert list(tmp_path.iterdir()) == [] and list(hook.keep_ckpt_ids) == []


def test_nan_loss_error_names_iteration_and_terms():
    hook = FiniteLossHook()
    runner = StubRunner(optim_wrapper=SimpleNamespace(), iter=6)
    hook.before_train_iter(runner, 6)
    outputs = {'loss': torch.tensor(math.nan), 'loss_cls': torch.tensor(0.5),
               'loss_bbox': torch.tensor(math.inf), 'acc': torch.tensor(math.nan)}
    with pytest.raises(NonFiniteLossError, match=r'iteration 7 \(of 8\): loss terms not finite: '
                                                 r'loss_bbox=inf, loss=nan\. No checkpoint'):
        hook.after_train_iter(runner, 6, outputs=outputs)
    hook.after_train_iter(runner, 6, outputs={'loss': torch.tensor(1.0), 'acc': torch.tensor(math.nan)})


@pytest.mark.skipif(TORCH_VERSION < (2, 3), reason='a CPU GradScaler needs torch >= 2.3')
def test_dynamic_loss_scale_skips_are_counted_not_fatal():
    """AmpOptimWrapper needs a GPU; its GradScaler runs on the CPU: an
    overflowing step is skipped by the scaler and counted, not fatal."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = grad_scaler('cpu', init_scale=2.0 ** 8)
    wrapper = SimpleNamespace(loss_scaler=scaler, _scale_update_param=None)  # loss_scale='dynamic'
    hook, runner = FiniteLossHook(), StubRunner(optim_wrapper=wrapper)
    before = model.weight.detach().clone()
    for value in (math.inf, 1.0):
        hook.before_train_iter(runner, 0)
        loss = model(torch.ones(1, 2)).sum() * value
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        hook.after_train_iter(runner, 0, outputs={'loss': loss.detach()})
        if value == math.inf:
            assert torch.equal(model.weight, before), 'the overflowing step was not skipped'
    assert hook.skipped_steps == 1
    assert runner.message_hub.get_scalar('train/skipped_steps').current() == 1
    assert any('optimizer step skipped, scale 256 -> 128' in w for w in runner.warnings)
    wrapper._scale_update_param = 512.0  # a fixed loss scale: a non-finite loss is fatal
    hook.before_train_iter(runner, 0)
    with pytest.raises(NonFiniteLossError):
        hook.after_train_iter(runner, 0, outputs={'loss': torch.tensor(math.nan)})

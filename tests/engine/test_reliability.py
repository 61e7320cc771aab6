"""Scale-out and crash safety through the user's tools, on the CPU:

- a 2-process gloo run trains and evaluates, and its weights after N
  iterations equal a 1-process run with the same global batch and seed;
- a rank that dies or hangs fails the whole job with a clear error instead of
  hanging (torchrun's agent + the process-group timeout);
- a finished rank ends with status 0 even while a collective's worker
  thread still takes the GIL (no abort in interpreter finalization);
- (kill -9 mid-run, then ``--resume``, bit for bit: tests/engine/test_exact_resume.py);
- checkpoints and ``last_checkpoint`` are replaced atomically and a failed
  save keeps the last good checkpoint;
- a checkpoint that needs pickled classes is refused unless trusted per file.
"""
import os
import re
import signal
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest
import torch
from .test_training import ROOT, without_module_list

from vattn_mm.datasets import make_demo_dataset
from vattn_mm.engine import CrashSafeCheckpointHook
from vattn_mm.utils import (TRUST_ENV, UntrustedCheckpointError, atomic_write, load_checkpoint_file,
                            load_runner_checkpoint, trust_checkpoint)

#: slow (multi-process training runs that fail, hang and recover)
#: one xdist worker runs the modules that start torchrun jobs, one module at a time
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('torchrun')]

SEG_DEMO = ROOT / 'configs/demo/pvtv2_b0_upernet_demo.py'
ITERS = 3
#: 2-process vs 1-process weights: same samples, same global mean; only the
#: float summation order of the gradient (DDP all-reduce of two half-batch
#: means vs. one 4-image mean) differs: measured 6e-8 after 3 SGD steps of up
#: to 9e-2; a wrong sample order or gradient scale is off by about a step.
DIST_ATOL = 1e-5


@pytest.fixture(scope='module')
def demo64(tmp_path_factory):
    return make_demo_dataset(tmp_path_factory.mktemp('demo64'), num_train=8, num_val=2, size=64)


def tiny_seg_config(directory: Path, data_root: Path, flip_prob: float,
                    sgd: bool = False) -> Path:
    """The UperNet demo on 64x64 images, small heads and the fault hook.

    No BatchNorm in the trained path (GroupNorm heads; PVTv2 has none) and no
    dropout, so that per-process batch statistics / random masks cannot make a
    2-process run differ from a 1-process one.  ``sgd``: plain SGD at a
    constant rate, so that a weight change is proportional to the gradient
    (AdamW's normalised steps would hide a wrongly scaled gradient).
    """
    ade = f'{data_root}/ade/'
    gn = "dict(type='GN', num_groups=4, requires_grad=True)"
    path = directory / 'tiny_seg.py'
    path.write_text(f"""
_base_ = ['{SEG_DEMO}']
custom_imports = dict(imports=['vattn_mm', 'tests.fault_hooks'], allow_failed_imports=False)
custom_hooks = [dict(type='FaultInjectionHook')]
model = dict(
    data_preprocessor=dict(size=(64, 64)),
    decode_head=dict(channels=16, dropout_ratio=0.0, norm_cfg={gn}),
    auxiliary_head=dict(channels=16, dropout_ratio=0.0, norm_cfg={gn}))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='RandomFlip', prob={flip_prob}),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root='{ade}', pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(data_root='{ade}'))
test_dataloader = val_dataloader
train_cfg = dict(max_iters={ITERS}, val_interval={ITERS})
default_hooks = dict(checkpoint=dict(interval=2, max_keep_ckpts=2), logger=dict(interval=1))
randomness = dict(seed=0, deterministic=True)
""" + ("""optim_wrapper = dict(optimizer=dict(_delete_=True, type='SGD', lr=0.05, momentum=0.9))
param_scheduler = []
""" if sgd else ''))
    return path


def tool_env(**extra: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    for name in ('VATTN_TEST_FAULT', 'PORT'):  # tools/dist_train.sh picks a free port itself
        env.pop(name, None)
    env.update(extra)
    return env


def start(args: list, log: Path, **env: str) -> subprocess.Popen:
    with open(log, 'w') as f:
        return subprocess.Popen(args, cwd=ROOT, env=tool_env(**env), stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc: subprocess.Popen, log: Path, timeout: int = 300, ok: bool = True) -> str:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f'{proc.args} still running after {timeout}s:\n'
                             f'{log.read_text()[-3000:]}')
    text = log.read_text()
    if ok:
        assert proc.returncode == 0, f'{proc.args} failed:\n{without_module_list(text)[-5000:]}'
    return text


def train_cmd(config: Path, work: Path, *extra: str) -> list:
    return [sys.executable, 'tools/train.py', str(config), '--work-dir', str(work), *extra]


def dist_cmd(config: Path, work: Path, *extra: str) -> list:
    return ['bash', 'tools/dist_train.sh', str(config), '2', '--work-dir', str(work), *extra]


def logged_train_iters(log: str) -> list:
    """The training iterations a run's log reports, in order (mmengine's
    LoggerHook lines, e.g. `Iter(train) [ 3/50]`)."""
    return [int(i) for i in re.findall(r'Iter\(train\) \[\s*(\d+)/\d+\]', log)]


def weights(path: Path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=True)['state_dict']


def test_two_process_run_matches_one_process(demo64, tmp_path):
    """Training: the weights after the last step agree to DIST_ATOL.
    Evaluation: the 1-process run's checkpoint tested by 1 and by 2
    processes gives the same mIoU exactly (the same weights, every image
    through the same batch-1 forward on one thread; only the gathering of
    the per-image results across ranks differs)."""
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.0, sgd=True)
    no_val = f'train_cfg.val_interval={ITERS + 1}'
    one = start(train_cmd(config, tmp_path / 'one', '--cfg-options', no_val),
                tmp_path / 'one.log')
    two = start(dist_cmd(config, tmp_path / 'two', '--cfg-options',
                         'train_dataloader.batch_size=2', no_val), tmp_path / 'two.log')
    finish(one, tmp_path / 'one.log')
    log = finish(two, tmp_path / 'two.log')
    assert 'Distributed training: True' in log and 'GPU number: 2' in log
    checkpoint = tmp_path / 'one' / f'iter_{ITERS}.pth'
    tests = {n: start(cmd + ['--work-dir', str(tmp_path / f'test{n}')], tmp_path / f'test{n}.log')
             for n, cmd in ((1, [sys.executable, 'tools/test.py', str(config), str(checkpoint)]),
                            (2, ['bash', 'tools/dist_test.sh', str(config), str(checkpoint), '2']))}
    texts = {n: finish(proc, tmp_path / f'test{n}.log') for n, proc in tests.items()}
    assert 'GPU number: 2' in texts[2]
    miou = {n: re.findall(r'mIoU: ([\d.]+)', text) for n, text in texts.items()}
    assert len(miou[1]) == 1 and miou[1] == miou[2], f'mIoU tested by 1 and 2 processes: {miou}'
    ref, dist = weights(checkpoint), weights(tmp_path / 'two' / f'iter_{ITERS}.pth')
    assert ref.keys() == dist.keys()
    step = max((ref[k] - weights(tmp_path / 'one' / 'iter_2.pth')[k]).abs().max() for k in ref)
    assert step > 100 * DIST_ATOL, f'the last SGD step changed the weights by only {step:.3g}'
    diff = {k: (ref[k].float() - dist[k].float()).abs().max().item() for k in ref}
    worst = max(diff, key=diff.get)
    assert diff[worst] <= DIST_ATOL, f'{worst}: max |diff| {diff[worst]:.3g}'


FAULTS = {'raise': 'injected failure on rank 1 at iteration 1',  # a Python exception
          'kill': 'Signal 9 (SIGKILL)',                           # e.g. the OOM killer
          'hang': 'Timed out waiting 30000ms'}                     # a wedged rank
#: the process-group timeout of the hang job (s), the only job that needs one: it
#: bounds every collective, including those before the hang, so it must exceed
#: any start-up skew between the two ranks on a loaded machine (seconds at most)
HANG_TIMEOUT = 30


@pytest.fixture(scope='module')
def fault_jobs(demo64, tmp_path_factory):
    """One 2-process job per fault, all started at once (they mostly wait)."""
    jobs = {}
    for fault in FAULTS:
        tmp = tmp_path_factory.mktemp(f'fault_{fault}')
        config = tiny_seg_config(tmp, demo64, flip_prob=0.0)
        timeout = [f'env_cfg.dist_cfg.timeout={HANG_TIMEOUT}'] if fault == 'hang' else []
        cmd = dist_cmd(config, tmp / 'work', '--cfg-options', 'train_dataloader.batch_size=2',
                       *timeout)
        jobs[fault] = (start(cmd, tmp / 'job.log', VATTN_TEST_FAULT=f'{fault}:1:1'),
                       tmp / 'job.log', tmp / 'work')
    yield jobs
    for proc, _, _ in jobs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize('fault', sorted(FAULTS))
def test_failing_rank_fails_the_job(fault, fault_jobs):
    """Rank 1 raises / is SIGKILLed / hangs at iteration 1: torchrun's agent
    (or, for the hang, rank 0's process-group timeout) ends the whole job by
    itself with a non-zero exit and a summary naming the root cause."""
    proc, log, work = fault_jobs[fault]
    text = finish(proc, log, timeout=600, ok=False)
    assert proc.returncode != 0, text[-3000:]
    assert 'ChildFailedError' in text and 'Root Cause' in text, text[-3000:]
    assert FAULTS[fault] in text, text[-3000:]
    if fault == 'hang':
        assert (work / 'fault_hang_rank1').exists()


LATE_GIL_PROBE = """
import atexit, sys, time
from pathlib import Path
import torch
import torch.distributed as dist
from vattn_mm.utils.distributed_exit import distributed_teardown

def linger(future):
    while True:  # takes the GIL again every 5 ms, like the late release of a collective's tensors
        time.sleep(0.005)

dist.init_process_group('gloo')
side = dist.new_group(backend='gloo')  # the teardown barrier must not wait for its work
marker = Path(sys.argv[1], f'atexit_rank{dist.get_rank()}')
atexit.register(marker.write_text, 'handlers ran')
with distributed_teardown():
    future = dist.all_reduce(torch.ones(4), group=side, async_op=True).get_future()
    future.then(linger)  # runs on the side group's worker thread, forever
    future.wait()
    print(f'rank {dist.get_rank()} finished', flush=True)
raise SystemExit('distributed_teardown returned instead of ending the process')
"""


def test_rank_ends_cleanly_while_a_collective_thread_still_needs_the_gil(tmp_path):
    """The rank abort seen in about 1 of 20 two-process runs, made certain:
    a gloo worker thread takes the GIL after the run.  Were the process left
    to interpreter finalization, that thread would be torn down inside a C++
    destructor ('terminate called without an active exception', SIGABRT);
    the teardown ends the process before, after atexit handlers and flushes."""
    probe = tmp_path / 'late_gil_probe.py'
    probe.write_text(LATE_GIL_PROBE)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
           str(probe), str(tmp_path)]
    log = tmp_path / 'probe.log'
    text = finish(start(cmd, log), log, timeout=120)
    assert 'rank 0 finished' in text and 'rank 1 finished' in text
    assert 'terminate called' not in text
    for rank in (0, 1):
        assert (tmp_path / f'atexit_rank{rank}').read_text() == 'handlers ran'


def slurm_train(folder: Path, *extra: str, **env: str) -> tuple:
    """tools/slurm_train.sh with stand-ins for srun (records its arguments,
    exits with $SRUN_EXIT) and scontrol (records its arguments), in
    ``folder``: (exit status, srun's arguments, scontrol's arguments)."""
    bin_dir = folder / 'bin'
    bin_dir.mkdir(parents=True)
    for tool in ('srun', 'scontrol'):
        record = f'for a in "$@"; do echo "$a"; done > {folder}/{tool}.log'
        exit_status = '\nexit "${SRUN_EXIT:-0}"' if tool == 'srun' else ''
        (bin_dir / tool).write_text(f'#!/bin/sh\n{record}{exit_status}\n')
        (bin_dir / tool).chmod(0o755)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith('SLURM_')},
           'PATH': f'{bin_dir}{os.pathsep}{os.environ["PATH"]}', **env}
    status = subprocess.run(['bash', 'tools/slurm_train.sh', 'gpu', 'pvt', 'configs/x.py',
                             'work dir', *extra], cwd=ROOT, env=env).returncode
    logs = {tool: folder / f'{tool}.log' for tool in ('srun', 'scontrol')}
    return status, *(p.read_text().splitlines() if p.exists() else [] for p in logs.values())


def test_slurm_train_command(tmp_path):
    """tools/slurm_train.sh hands srun one task per GPU over the nodes, asks
    for SIGTERM two minutes before the time limit and passes the user's extra
    arguments."""
    status, args, _ = slurm_train(tmp_path, '--resume', '--cfg-options', 'a=1', GPUS='16',
                                  SRUN_ARGS='--qos=high --time=2:00:00')
    assert status == 0 and args[:2] == ['-p', 'gpu'] and '--job-name=pvt' in args
    assert {'--gres=gpu:8', '--ntasks=16', '--ntasks-per-node=8', '--cpus-per-task=5',
            '--kill-on-bad-exit=1', '--signal=TERM@120', '--qos=high',
            '--time=2:00:00'} <= set(args)
    assert args[-8:] == [str(ROOT / 'tools/train.py'), 'configs/x.py', '--work-dir=work dir',
                         '--launcher', 'slurm', '--resume', '--cfg-options', 'a=1']


def test_slurm_train_requeues_a_preempted_batch_job_which_then_resumes(tmp_path):
    status, _, requeue = slurm_train(tmp_path / 'preempted', SRUN_EXIT='143', SLURM_JOB_ID='42')
    assert status == 143 and requeue == ['requeue', '42']
    status, args, _ = slurm_train(tmp_path / 'requeued', SLURM_JOB_ID='42', SLURM_RESTART_COUNT='1')
    assert status == 0 and args[-1] == '--resume'
    status, _, requeue = slurm_train(tmp_path / 'failed', SRUN_EXIT='1', SLURM_JOB_ID='42')
    assert status == 1 and requeue == []


def test_atomic_write_keeps_old_content_on_failure(tmp_path, monkeypatch):
    target = tmp_path / 'iter_2.pth'
    atomic_write(target, b'good checkpoint')
    assert target.read_bytes() == b'good checkpoint'

    def crash(fd):  # the crash comes after part of the data is written
        raise OSError('No space left on device')
    monkeypatch.setattr(os, 'fsync', crash)
    with pytest.raises(OSError, match='No space left'):
        atomic_write(target, b'new checkpoint, never complete')
    assert target.read_bytes() == b'good checkpoint'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['iter_2.pth']


class StubRunner:
    """What CheckpointHook uses of a runner; ``save_checkpoint`` can fail."""

    def __init__(self, work_dir: Path, fail: str = ''):
        from mmengine.logging import MessageHub, MMLogger
        self.work_dir, self.fail = str(work_dir), fail
        self.iter = self.epoch = 0
        self.logger = MMLogger.get_instance('stub_runner')
        self.message_hub = MessageHub.get_instance(f'stub_hub_{work_dir}')

    def save_checkpoint(self, out_dir, filename, *args, **kwargs) -> None:
        if filename == self.fail:
            raise OSError('No space left on device')
        atomic_write(Path(out_dir) / filename, filename.encode())


def test_failed_save_keeps_last_good_checkpoint(tmp_path):
    """mmengine removes the oldest kept checkpoint before writing the new one
    (with max_keep_ckpts=1 a failed save leaves none); ours removes it after."""
    hook = CrashSafeCheckpointHook(interval=1, by_epoch=False, max_keep_ckpts=1)
    runner = StubRunner(tmp_path, fail='iter_3.pth')
    hook.before_train(runner)
    hook._save_checkpoint_with_step(runner, 1, {})
    hook._save_checkpoint_with_step(runner, 2, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ['iter_2.pth', 'last_checkpoint']
    with pytest.raises(OSError):
        hook._save_checkpoint_with_step(runner, 3, {})
    assert (tmp_path / 'iter_2.pth').read_bytes() == b'iter_2.pth'
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_2.pth')
    assert isinstance(hook.keep_ckpt_ids, deque)


def test_failed_save_of_a_new_best_keeps_the_previous_best(tmp_path):
    """mmengine removes the previous best checkpoint before writing the new
    one; ours removes it after."""
    hook = CrashSafeCheckpointHook(interval=1, by_epoch=False, save_best='mIoU', rule='greater')
    runner = StubRunner(tmp_path, fail='best_mIoU_iter_3.pth')
    hook.before_train(runner)
    runner.iter = 2
    hook._save_best_checkpoint(runner, {'mIoU': 0.5})
    assert (tmp_path / 'best_mIoU_iter_2.pth').is_file()
    runner.iter = 3
    with pytest.raises(OSError, match='No space left'):
        hook._save_best_checkpoint(runner, {'mIoU': 0.6})
    assert (tmp_path / 'best_mIoU_iter_2.pth').read_bytes() == b'best_mIoU_iter_2.pth'
    hook = CrashSafeCheckpointHook(interval=1, by_epoch=False, save_best='mIoU', rule='greater')
    runner = StubRunner(tmp_path)   # the run resumed from its last checkpoint
    hook.before_train(runner)
    hook.best_ckpt_path = str(tmp_path / 'best_mIoU_iter_2.pth')
    runner.iter = 4
    hook._save_best_checkpoint(runner, {'mIoU': 0.7})
    assert sorted(p.name for p in tmp_path.glob('best_*')) == ['best_mIoU_iter_4.pth']


class CustomMeta:
    """A user class some training code put into its checkpoint."""


class Payload:
    """Unpickling it would run code: it touches a marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_untrusted_checkpoint_refused_until_trusted(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    custom = tmp_path / 'custom.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': CustomMeta()}, custom)
    for load in (load_checkpoint_file, load_runner_checkpoint):  # pretrained; SafeRunner's
        with pytest.raises(UntrustedCheckpointError,
                           match=rf'needs tests\.engine\.test_reliability\.CustomMeta.*--trust-checkpoint '
                                 rf'{custom}.*{TRUST_ENV}={custom}'):
            load(str(custom))
    marker = tmp_path / 'code_ran'
    payload = tmp_path / 'payload.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'extra': Payload(str(marker))}, payload)
    with pytest.raises(UntrustedCheckpointError, match='can run arbitrary code'):
        load_runner_checkpoint(str(payload))
    assert not marker.exists(), 'a refused file ran code'
    monkeypatch.setenv(TRUST_ENV, str(payload))  # trust is per file
    with pytest.raises(UntrustedCheckpointError):
        load_runner_checkpoint(str(custom))
    trust_checkpoint(str(custom))  # what --trust-checkpoint does: adds one file
    assert os.environ[TRUST_ENV] == f'{payload}{os.pathsep}{custom}'
    with pytest.raises(FileNotFoundError, match='--trust-checkpoint: no such file'):
        trust_checkpoint(str(tmp_path / 'missing.pth'))
    assert isinstance(load_runner_checkpoint(str(custom))['meta'], CustomMeta)
    assert torch.equal(load_runner_checkpoint(str(payload))['state_dict']['w'], torch.ones(2))
    assert marker.exists(), 'a trusted file is unpickled in full'

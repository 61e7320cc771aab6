"""Preemption through the user's tools: a real SIGTERM (two, in fact) to a
running tools/train.py stops it after the iteration it is in, with a
checkpoint of that iteration and exit status 143; ``--resume`` then ends with
the weights of a run never stopped, every tensor ``torch.equal``: an
iteration-based run, and an epoch-based one stopped inside an epoch."""
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from vattn_mm.engine import PREEMPTED_EXIT_CODE
from vattn_mm.utils.atomic_io import TMP_PREFIX

from .test_reliability import (demo64, finish, logged_train_iters, start,  # noqa: F401
                               tiny_seg_config, train_cmd, weights)

pytestmark = pytest.mark.slow

#: loop -> (options, iterations in all, the uninterrupted run's last checkpoint)
LOOPS = {
    'iteration-based': (('train_cfg.max_iters=6',), 6, 'iter_6.pth'),
    # 8 images, batch 1: epochs of 8 iterations, stopped inside the first
    'epoch-based': (('train_cfg._delete_=True', 'train_cfg.type=EpochBasedTrainLoop',
                     'train_cfg.max_epochs=2', 'train_cfg.val_interval=2',
                     'train_dataloader.batch_size=1', 'train_dataloader.sampler.type=DefaultSampler',
                     'default_hooks.checkpoint.by_epoch=True', 'default_hooks.checkpoint.interval=1'),
                    16, 'epoch_2.pth'),
}


def wait_for(log: Path, pattern: str, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text() if log.exists() else ''):
        assert proc.poll() is None, f'ended before {pattern!r}:\n{log.read_text()[-3000:]}'
        assert time.monotonic() < deadline, f'no {pattern!r} after {timeout}s'
        time.sleep(0.05)


@pytest.mark.parametrize('loop', LOOPS)
def test_sigterm_stops_after_the_iteration_with_a_checkpoint_and_resume_is_exact(demo64, tmp_path,  # noqa: F811
                                                                                loop):
    options, iters, last = LOOPS[loop]
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.5)
    args = ('--cfg-options', *options, 'model.backbone.drop_path_rate=0.1')
    whole = start(train_cmd(config, tmp_path / 'whole', *args), tmp_path / 'whole.log')
    work, log = tmp_path / 'stopped', tmp_path / 'stopped.log'
    run = start(train_cmd(config, work, *args), log)
    wait_for(log, rf'Iter\(train\) \[\s*3/{iters}\]', run)
    run.send_signal(signal.SIGTERM)
    run.send_signal(signal.SIGTERM)   # a second one, while it finishes the iteration or saves
    text = finish(run, log, ok=False)
    assert run.returncode == PREEMPTED_EXIT_CODE, text[-3000:]
    stopped = re.search(r'SIGTERM received: stopped after iteration (\d+) with checkpoint (\S+);',
                        text)
    assert stopped, text[-3000:]
    at, checkpoint = int(stopped.group(1)), stopped.group(2)
    assert at in (3, 4) and checkpoint == str(work / f'iter_{at}.pth')
    assert (work / 'last_checkpoint').read_text() == checkpoint
    assert (work / f'iter_{at}.pth.sha256').exists()
    assert not list(work.glob(f'{TMP_PREFIX}*'))
    resumed = finish(start(train_cmd(config, work, '--resume', *args), tmp_path / 'resume.log'),
                     tmp_path / 'resume.log')
    assert logged_train_iters(resumed) == list(range(at + 1, iters + 1)), resumed[-3000:]
    finish(whole, tmp_path / 'whole.log')
    if loop == 'epoch-based':   # the epoch checkpoint superseded the one inside the epoch
        assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_1.pth', 'epoch_2.pth']
    ref, got = weights(tmp_path / 'whole' / last), weights(work / last)
    assert ref.keys() == got.keys()
    differ = [k for k in ref if not torch.equal(ref[k], got[k])]
    assert not differ, differ[:5]


def test_safe_runner_builds_epoch_based_loops_that_resume_inside_an_epoch():
    from mmengine.runner import EpochBasedTrainLoop, IterBasedTrainLoop

    from vattn_mm.engine import ResumableEpochBasedTrainLoop
    from vattn_mm.engine.loops import resumable_loop_cfg
    for loop in (dict(by_epoch=True, max_epochs=3), dict(type='EpochBasedTrainLoop', max_epochs=3),
                 dict(type=EpochBasedTrainLoop, max_epochs=3)):
        assert resumable_loop_cfg(loop) == dict(type=ResumableEpochBasedTrainLoop, max_epochs=3)
    for loop in (dict(by_epoch=False, max_iters=3), dict(type='IterBasedTrainLoop', max_iters=3),
                 dict(type=IterBasedTrainLoop, max_iters=3)):
        assert resumable_loop_cfg(loop) == loop


@pytest.mark.parametrize('iteration, epoch, expected', [
    (0, 0, 0), (3, 0, 3), (8, 1, 0), (11, 1, 3),
    (16, 1, 8),   # its last iteration, before the epoch's end hooks
    (30, 1, 8),   # written with longer epochs (fewer processes): at most the whole epoch
])
def test_the_resumed_epoch_skips_what_its_checkpoint_trained(iteration, epoch, expected):
    from vattn_mm.engine import ResumableEpochBasedTrainLoop
    loop = ResumableEpochBasedTrainLoop.__new__(ResumableEpochBasedTrainLoop)
    loop.dataloader, loop._iter, loop._epoch = [None] * 8, iteration, epoch   # epochs of 8
    assert loop.trained_in_epoch() == expected

"""Preemption through the user's tools: a real SIGTERM (two, in fact) to a
running tools/train.py stops it after the iteration it is in, with a
checkpoint of that iteration and exit status 143; ``--resume`` then ends with
the weights of a run never stopped, every tensor ``torch.equal``."""
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

ITERS = 6


def wait_for(log: Path, pattern: str, proc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text() if log.exists() else ''):
        assert proc.poll() is None, f'ended before {pattern!r}:\n{log.read_text()[-3000:]}'
        assert time.monotonic() < deadline, f'no {pattern!r} after {timeout}s'
        time.sleep(0.05)


def test_sigterm_stops_after_the_iteration_with_a_checkpoint_and_resume_is_exact(demo64, tmp_path):  # noqa: F811
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.5)
    args = ('--cfg-options', f'train_cfg.max_iters={ITERS}', 'model.backbone.drop_path_rate=0.1')
    whole = start(train_cmd(config, tmp_path / 'whole', *args), tmp_path / 'whole.log')
    work, log = tmp_path / 'stopped', tmp_path / 'stopped.log'
    run = start(train_cmd(config, work, *args), log)
    wait_for(log, rf'Iter\(train\) \[\s*3/{ITERS}\]', run)
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
    assert logged_train_iters(resumed) == list(range(at + 1, ITERS + 1)), resumed[-3000:]
    finish(whole, tmp_path / 'whole.log')
    ref, got = weights(tmp_path / 'whole' / f'iter_{ITERS}.pth'), weights(work / f'iter_{ITERS}.pth')
    assert ref.keys() == got.keys()
    differ = [k for k in ref if not torch.equal(ref[k], got[k])]
    assert not differ, differ[:5]

"""A disk that fills up during training, for real: the run's work dir is a
tmpfs this test mounts and shrinks after the first checkpoint, so that the
next checkpoint, or the next log line, cannot be written. The run stops with
an error naming the file or folder and the space; the previous checkpoint
stays the latest, intact and verifying, nothing half-written stands under a
final name, and once there is space again the run resumes."""
import errno
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from vattn_mm.utils.atomic_io import TMP_PREFIX
from vattn_mm.utils.checksum import checksum_problem

from .test_reliability import (demo64, finish, logged_train_iters, start,  # noqa: F401
                               tiny_seg_config, train_cmd)

pytestmark = pytest.mark.slow


def wait_for_checkpoint(work: Path, run, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not (work / 'last_checkpoint').exists():   # written after the checkpoint and its checksum
        assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)


def used_kib(disk: Path) -> int:
    return int(subprocess.run(['df', '--output=used', '-k', str(disk)], capture_output=True,
                              text=True, check=True).stdout.split()[-1])


def resize(disk: Path, kib: int) -> None:
    subprocess.run(['mount', '-o', f'remount,size={kib}k', str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Shrink the tmpfs to what it holds and fill what is left: no new page
    can be written."""
    resize(disk, used_kib(disk) + 64)
    filler = disk / 'filler'
    with open(filler, 'wb', buffering=0) as f:
        try:
            while True:
                f.write(bytes(4096))
        except OSError as err:
            assert err.errno == errno.ENOSPC
    return filler


def test_a_full_disk_at_a_checkpoint_keeps_the_previous_one(demo64, tmpfs, tmp_path):  # noqa: F811
    disk = tmpfs('512m')
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.0)
    work, log = disk / 'work', tmp_path / 'train.log'
    run = start(train_cmd(config, work, '--cfg-options', 'train_cfg.max_iters=6'), log)
    first = work / 'iter_2.pth'
    wait_for_checkpoint(work, run, log)
    resize(disk, used_kib(disk) + first.stat().st_size // 2048)   # half a checkpoint more
    text = finish(run, log, ok=False)
    assert run.returncode != 0
    assert f'no space left in {work} to write {work}/iter_4.pth (' in text, text[-3000:]
    assert 'bytes needed' in text and 'what was there under that name is unchanged' in text
    assert (work / 'last_checkpoint').read_text() == str(first)
    assert checksum_problem(str(first)) is None
    torch.load(first, map_location='cpu', weights_only=True)
    assert sorted(p.name for p in work.glob('iter_*')) == ['iter_2.pth', 'iter_2.pth.sha256']
    assert not list(work.glob(f'{TMP_PREFIX}*'))


def test_a_full_disk_in_the_logs_and_the_metrics_keeps_the_checkpoint_and_resumes(
        demo64, tmpfs, tmp_path):  # noqa: F811
    disk = tmpfs('512m')
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.0)
    work, log = disk / 'work', tmp_path / 'train.log'
    args = ('--cfg-options', 'train_cfg.max_iters=60', 'default_hooks.checkpoint.interval=30')
    run = start(train_cmd(config, work, *args), log)
    checkpoint = work / 'iter_30.pth'
    wait_for_checkpoint(work, run, log)
    (work / 'test_metrics.json').write_text('{"mIoU": 41.0}')   # an earlier evaluation's
    filler = fill(disk)
    text = finish(run, log, ok=False)
    assert run.returncode != 0
    assert f'DiskFullError: [Errno {errno.ENOSPC}] no space left in {work} to write the log' \
        in text or f'in {work} to write the logs and scalars under {work}/' in text, text[-3000:]
    assert f'the latest checkpoint, {checkpoint}, is unchanged' in text
    assert f'--work-dir {work} --resume`' in text
    assert 'Logging error' not in text   # not logging's traceback per line, then training on
    assert (work / 'last_checkpoint').read_text() == str(checkpoint)
    assert checksum_problem(str(checkpoint)) is None
    assert not list(work.glob(f'{TMP_PREFIX}*'))

    test_log = tmp_path / 'test.log'
    evaluation = start([sys.executable, 'tools/test.py', str(config), str(checkpoint),
                        '--work-dir', str(work)], test_log)
    text = finish(evaluation, test_log, ok=False)
    assert evaluation.returncode != 0
    assert f'DiskFullError: [Errno {errno.ENOSPC}] no space left in {work}' in text, text[-3000:]
    assert json.loads((work / 'test_metrics.json').read_text()) == {'mIoU': 41.0}

    filler.unlink()
    resize(disk, 512 * 1024)
    resumed = finish(start(train_cmd(config, work, '--resume', *args), tmp_path / 'resume.log'),
                     tmp_path / 'resume.log')
    assert logged_train_iters(resumed) == list(range(31, 61)), resumed[-3000:]

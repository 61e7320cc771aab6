"""Checkpoint checksums through the user's tools: every checkpoint a run
writes has its SHA-256 beside it; a checkpoint truncated or with a bit flipped
in its tensor data is refused by ``--resume`` and ``tools/test.py`` naming the
newest good one, and an automatic ``--resume`` falls back to that one."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vattn_mm.utils.checksum import (CorruptCheckpointError, newest_good_checkpoint,
                                     verify_checkpoint, write_checksum)

from .test_reliability import ROOT, demo64, finish, logged_train_iters, start, tiny_seg_config, train_cmd  # noqa: F401

pytestmark = pytest.mark.slow

#: checkpoints every 2 iterations, the last 2 kept: iter_4.pth and iter_6.pth remain
ITERS = 6


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10   # inside the largest tensor's data: torch.load would not notice
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) * 3 // 5])


DAMAGE = {'bit-flip': flip_a_bit, 'truncated': truncate}


@pytest.fixture(scope='module')
def trained(demo64, tmp_path_factory):  # noqa: F811
    """(config, work dir) of a tools/train.py run of ITERS iterations."""
    tmp = tmp_path_factory.mktemp('checksums')
    config, work, log = tiny_seg_config(tmp, demo64, flip_prob=0.0), tmp / 'work', tmp / 'train.log'
    finish(start(train_cmd(config, work, '--cfg-options', f'train_cfg.max_iters={ITERS}'), log), log)
    return config, work


def damaged_copy(trained, tmp_path: Path, damage: str) -> Path:
    """A copy of the trained run's work dir with its latest checkpoint damaged."""
    work = tmp_path / 'work'
    shutil.copytree(trained[1], work)
    (work / 'last_checkpoint').write_text(str(work / f'iter_{ITERS}.pth'))
    DAMAGE[damage](work / f'iter_{ITERS}.pth')
    return work


def test_every_checkpoint_has_a_checksum_that_sha256sum_accepts(trained):
    work = trained[1]
    names = sorted(p.name for p in work.glob('iter_*'))
    assert names == ['iter_4.pth', 'iter_4.pth.sha256', f'iter_{ITERS}.pth',
                     f'iter_{ITERS}.pth.sha256'], names   # the rotated-out iter_2 took its own
    check = subprocess.run(['sha256sum', '-c', 'iter_4.pth.sha256', f'iter_{ITERS}.pth.sha256'],
                           cwd=work, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize('damage', sorted(DAMAGE))
def test_resuming_from_a_damaged_checkpoint_names_the_newest_good_one(trained, tmp_path, damage):
    config, work = trained[0], damaged_copy(trained, tmp_path, damage)
    log = tmp_path / 'resume.log'
    damaged, good = work / f'iter_{ITERS}.pth', work / 'iter_4.pth'
    text = finish(start(train_cmd(config, work, '--resume', str(damaged)), log), log, ok=False)
    assert f'{damaged} is damaged' in text, text[-3000:]
    assert f'The newest checkpoint that verifies is {good}; resume from it: ' \
           f'`python tools/train.py {config} --work-dir {work} --resume {good}`' in text, text[-3000:]


def test_evaluating_a_damaged_checkpoint_is_refused(trained, tmp_path):
    config, work = trained[0], damaged_copy(trained, tmp_path, 'bit-flip')
    log = tmp_path / 'test.log'
    damaged = work / f'iter_{ITERS}.pth'
    cmd = [sys.executable, 'tools/test.py', str(config), str(damaged), '--work-dir', str(tmp_path / 'eval')]
    text = finish(start(cmd, log), log, ok=False)
    assert f'{damaged} is damaged' in text and f'verifies is {work / "iter_4.pth"}' in text, text[-3000:]


def test_automatic_resume_falls_back_to_the_newest_good_checkpoint(trained, tmp_path):
    config, work = trained[0], damaged_copy(trained, tmp_path, 'bit-flip')
    log = tmp_path / 'resume.log'
    text = finish(start(train_cmd(config, work, '--resume', '--cfg-options',
                                  f'train_cfg.max_iters={ITERS}'), log), log)
    assert f'Resuming from the newest checkpoint that verifies instead: {work / "iter_4.pth"}' \
        in text, text[-3000:]
    assert logged_train_iters(text) == [5, 6]


def test_a_file_without_a_checksum_loads_and_is_not_vouched_for(tmp_path):
    plain, checked = tmp_path / 'a.pth', tmp_path / 'b.pth'
    plain.write_bytes(b'written by another tool')
    checked.write_bytes(b'ours')
    write_checksum(str(checked), b'ours')
    verify_checkpoint(str(plain))
    assert newest_good_checkpoint(str(tmp_path)) == str(checked)
    checked.write_bytes(b'ourz')
    with pytest.raises(CorruptCheckpointError, match=r'b\.pth is damaged.*No other checkpoint'):
        verify_checkpoint(str(checked))

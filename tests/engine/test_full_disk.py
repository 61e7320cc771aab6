"""A disk that fills up during training, for real: the run's work dir is a
tmpfs this test mounts and shrinks after the first checkpoint, so the next
checkpoint cannot be written. The run stops with an error naming the file
and the space it needed; the previous checkpoint stays the latest, intact
and verifying, and nothing half-written stands under a final name."""
import subprocess
import time

import pytest
import torch

from vattn_mm.utils.atomic_io import TMP_PREFIX
from vattn_mm.utils.checksum import checksum_problem

from .test_reliability import demo64, finish, start, tiny_seg_config, train_cmd  # noqa: F401

pytestmark = pytest.mark.slow


def test_a_full_disk_at_a_checkpoint_keeps_the_previous_one(demo64, tmpfs, tmp_path):  # noqa: F811
    disk = tmpfs('512m')
    config = tiny_seg_config(tmp_path, demo64, flip_prob=0.0)
    work, log = disk / 'work', tmp_path / 'train.log'
    run = start(train_cmd(config, work, '--cfg-options', 'train_cfg.max_iters=6'), log)
    first = work / 'iter_2.pth'
    deadline = time.monotonic() + 300
    while not (work / 'last_checkpoint').exists():   # written after iter_2.pth and its checksum
        assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)
    used = int(subprocess.run(['df', '--output=used', '-k', str(disk)], capture_output=True,
                              text=True, check=True).stdout.split()[-1])
    room = used + first.stat().st_size // 2048   # half a checkpoint more, in KiB
    subprocess.run(['mount', '-o', f'remount,size={room}k', str(disk)], check=True)
    text = finish(run, log, ok=False)
    assert run.returncode != 0
    assert f'no space left in {work} to write {work}/iter_4.pth (' in text, text[-3000:]
    assert 'bytes needed' in text and 'what was there under that name is unchanged' in text
    assert (work / 'last_checkpoint').read_text() == str(first)
    assert checksum_problem(str(first)) is None
    torch.load(first, map_location='cpu', weights_only=True)
    assert sorted(p.name for p in work.glob('iter_*')) == ['iter_2.pth', 'iter_2.pth.sha256']
    assert not list(work.glob(f'{TMP_PREFIX}*'))

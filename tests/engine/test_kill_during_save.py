"""A process SIGKILLed inside a checkpoint save, at each point where a
crash could leave a mess: after the temporary file is written, after it
replaced the final name (before its checksum and ``last_checkpoint``), and
before the oldest kept checkpoint is removed. ``--resume`` then continues
from the last complete checkpoint and ends with the weights of a run never
stopped; no temporary file survives, and ``max_keep_ckpts`` checkpoints, each
verifying against its checksum, remain."""
import pytest
import torch

from vattn_mm.utils.atomic_io import TMP_PREFIX
from vattn_mm.utils.checksum import checksum_problem, recorded_sha256

from .test_reliability import demo64, finish, logged_train_iters, start, tiny_seg_config, train_cmd  # noqa: F401
from .test_reliability import weights

pytestmark = pytest.mark.slow

ITERS = 8
#: checkpoints every 2 iterations, 2 kept; the kill comes in the save after iteration 6
ARGS = ('--cfg-options', f'train_cfg.max_iters={ITERS}', 'model.backbone.drop_path_rate=0.1')
#: the point -> the checkpoint ``last_checkpoint`` names after the kill
LAST_GOOD = {'written': 4, 'replaced': 4, 'rotating': 6}


@pytest.fixture(scope='module')
def uninterrupted(demo64, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp('uninterrupted')
    config, log = tiny_seg_config(tmp, demo64, flip_prob=0.5), tmp / 'train.log'
    finish(start(train_cmd(config, tmp / 'work', *ARGS), log), log)
    return config, tmp / 'work'


#: ``make test`` kills at the first point, ``make test-extended`` at the other two
POINTS = [pytest.param(p, marks=() if p == 'written' else pytest.mark.extended)
          for p in sorted(LAST_GOOD)]


@pytest.mark.parametrize('point', POINTS)
def test_a_kill_inside_a_save_resumes_exactly_and_leaves_no_mess(uninterrupted, tmp_path, point):
    config, work = uninterrupted[0], tmp_path / 'work'
    killed = start(train_cmd(config, work, *ARGS), tmp_path / 'killed.log',
                   VATTN_TEST_FAULT=f'killsave-{point}:0:5')
    finish(killed, tmp_path / 'killed.log', ok=False)
    assert killed.returncode == -9
    last = LAST_GOOD[point]
    assert (work / 'last_checkpoint').read_text() == str(work / f'iter_{last}.pth')
    log = tmp_path / 'resume.log'
    text = finish(start(train_cmd(config, work, '--resume', *ARGS), log), log)
    assert logged_train_iters(text) == list(range(last + 1, ITERS + 1)), text[-3000:]
    assert not list(work.glob(f'{TMP_PREFIX}*'))
    kept = sorted(work.glob('iter_*.pth'))
    assert [p.name for p in kept] == [f'iter_{ITERS - 2}.pth', f'iter_{ITERS}.pth']
    assert all(recorded_sha256(str(p)) and checksum_problem(str(p)) is None for p in kept)
    ref, got = weights(uninterrupted[1] / f'iter_{ITERS}.pth'), weights(work / f'iter_{ITERS}.pth')
    assert not [k for k in ref if not torch.equal(ref[k], got[k])]

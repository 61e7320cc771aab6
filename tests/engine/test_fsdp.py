"""Sharded training (configs/_base_/fsdp.py: SafeFlexibleRunner, FSDP with one
unit per TokenBlock, with_cp) through tools/dist_train.sh on the CPU, where
torch's FSDP runs on gloo with ``device_id='cpu'``:

- 2 sharded processes with activation checkpointing end with the weights of
  1 unsharded process without it (same initial weights, global batch, seed);
- the checkpoints are full, ordinary mmengine checkpoints, and ``--resume``
  from one continues bit for bit (weights, SGD momentum, random state);
- the configuration errors the CPU path and FSDP bring are caught early.
"""
import re
import shutil

import pytest
import torch
from mmengine.config import Config, ConfigDict
from torch import nn

from .test_reliability import (DIST_ATOL, ITERS, demo64, dist_cmd, finish,  # noqa: F401
                               logged_train_iters, start, tiny_seg_config, train_cmd, weights)
from .test_training import ROOT

from vattn_mm.engine import SafeFlexibleRunner, SafeRunner, token_block_wrap_policy
from vattn_mm.engine.distributed import cpu_strategy, is_fsdp, setup_distributed
from vattn_mm.layers import TokenBlock

FSDP_FRAGMENT = ROOT / 'configs/_base_/fsdp.py'


def sharded_config(directory, unsharded):
    """``unsharded`` + the FSDP fragment, as the configs in configs/ add it."""
    path = directory / 'tiny_seg_fsdp.py'
    path.write_text(f"""_base_ = ['{unsharded}', '{FSDP_FRAGMENT}']
runner_type = 'SafeFlexibleRunner'
model = dict(backbone=dict(with_cp=True))
""")
    return path


def initial_weights(config, path):
    """The model of ``config`` as built and initialised once, for both runs:
    FlexibleRunner builds the model after the data loaders, so the same seed
    draws other initial weights than Runner."""
    from mmengine.registry import MODELS, DefaultScope, init_default_scope
    cfg = Config.fromfile(str(config))
    with DefaultScope.overwrite_default_scope('mmseg'):
        init_default_scope('mmseg')
        model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict(), 'meta': {}}, path)
    return path


@pytest.mark.slow
@pytest.mark.xdist_group('torchrun')  # with the other torchrun jobs (test_reliability.py)
def test_sharded_run_matches_unsharded_and_resumes_exactly(demo64, tmp_path):
    plain = tiny_seg_config(tmp_path, demo64, flip_prob=0.0, sgd=True)
    sharded = sharded_config(tmp_path, plain)
    init = f'load_from={initial_weights(plain, tmp_path / "init.pth")}'
    one = start(train_cmd(plain, tmp_path / 'one', '--cfg-options', init), tmp_path / 'one.log')
    two = start(dist_cmd(sharded, tmp_path / 'two', '--cfg-options', init,
                         'train_dataloader.batch_size=2'), tmp_path / 'two.log')
    single, log = finish(one, tmp_path / 'one.log'), finish(two, tmp_path / 'two.log')
    assert 'Distributed training: True' in log and 'GPU number: 2' in log
    assert logged_train_iters(log) == list(range(1, ITERS + 1))
    miou = [re.findall(r'mIoU: ([\d.]+)', text) for text in (single, log)]
    assert miou[1] and miou[0] == miou[1], f'mIoU 1 process {miou[0]}, 2 sharded {miou[1]}'

    ref, dist = weights(tmp_path / 'one' / f'iter_{ITERS}.pth'), \
        weights(tmp_path / 'two' / f'iter_{ITERS}.pth')
    assert ref.keys() == dist.keys()  # full state dict: the unwrapped model's names and shapes
    step = max((ref[k] - weights(tmp_path / 'one' / 'iter_2.pth')[k]).abs().max() for k in ref)
    assert step > 100 * DIST_ATOL, f'the last SGD step changed the weights by only {step:.3g}'
    diff = {k: (ref[k] - dist[k]).abs().max().item() for k in ref}
    worst = max(diff, key=diff.get)
    assert diff[worst] <= DIST_ATOL, f'{worst}: max |diff| {diff[worst]:.3g}'

    resumed = tmp_path / 'resumed'
    resumed.mkdir()
    shutil.copy(tmp_path / 'two' / 'iter_2.pth', resumed)
    (resumed / 'last_checkpoint').write_text(str(resumed / 'iter_2.pth'))
    proc = start(dist_cmd(sharded, resumed, '--resume', '--cfg-options',
                          'train_dataloader.batch_size=2'), tmp_path / 'resumed.log')
    text = finish(proc, tmp_path / 'resumed.log')
    assert 'resumed epoch: 0, iter: 2' in text and logged_train_iters(text) == [ITERS]
    again = weights(resumed / f'iter_{ITERS}.pth')
    changed = [k for k in dist if not torch.equal(dist[k], again[k])]
    assert not changed, f'resumed run differs from the uninterrupted one in {changed[:3]}'


def test_fragment_shards_token_blocks():
    cfg = Config.fromfile(str(FSDP_FRAGMENT))
    assert is_fsdp(cfg.strategy) and cfg.strategy.state_dict_cfg == 'full'
    assert cfg.strategy.model_wrapper.auto_wrap_policy == 'token_block_wrap_policy'
    block = TokenBlock(8, nn.Linear(8, 8), nn.Linear(8, 8))
    assert token_block_wrap_policy(block, recurse=False, nonwrapped_numel=0)
    assert not token_block_wrap_policy(nn.Linear(8, 8), recurse=False, nonwrapped_numel=0)
    assert token_block_wrap_policy(nn.Sequential(block), recurse=True, nonwrapped_numel=0)


def test_cpu_strategy_points_the_wrapper_at_the_cpu():
    fsdp = ConfigDict(type='ResumableFSDPStrategy', model_wrapper=dict(use_orig_params=True))
    cpu_strategy(fsdp)
    assert fsdp.model_wrapper == dict(use_orig_params=True, device_id='cpu')
    ddp = ConfigDict(type='DDPStrategy')
    cpu_strategy(ddp)
    assert ddp.model_wrapper['device_ids'] is None
    with pytest.raises(ValueError, match='DeepSpeedStrategy.*needs CUDA'):
        cpu_strategy(ConfigDict(type='DeepSpeedStrategy'))


def test_fsdp_without_a_launcher_is_refused():
    cfg = Config(dict(strategy=dict(type='ResumableFSDPStrategy'), launcher='none'))
    with pytest.raises(ValueError, match='tools/dist_train.sh'):
        setup_distributed(cfg)


def test_runners_refuse_what_they_would_get_wrong():
    with pytest.raises(ValueError, match="runner_type = 'SafeFlexibleRunner'"):
        SafeRunner.from_cfg(Config(dict(model=dict(type='Foo'),
                                        strategy=dict(type='ResumableFSDPStrategy'))))
    clipped = Config(dict(model=dict(type='Foo'), strategy=dict(type='ResumableFSDPStrategy'),
                          optim_wrapper=dict(clip_grad=dict(max_norm=1.0))))
    with pytest.raises(ValueError, match='each gradient shard by its own norm'):
        SafeFlexibleRunner.from_cfg(clipped)

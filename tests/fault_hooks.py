"""Fault injection for the reliability tests (imported through a config's
``custom_imports``; never part of the package).

``VATTN_TEST_FAULT=ACTION:RANK:ITER`` makes rank RANK, just before training
iteration ITER (0-based), ``raise`` an exception, ``kill`` itself with SIGKILL
or ``hang`` (sleep; it writes ``<work_dir>/fault_hang_rank<RANK>`` first so a
test knows it got there).
"""
import os
import signal
import time
from pathlib import Path

from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

ENV = 'VATTN_TEST_FAULT'


@HOOKS.register_module()
class FaultInjectionHook(Hook):
    priority = 'LOWEST'

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        spec = os.environ.get(ENV)
        if not spec:
            return
        action, rank, at_iter = spec.split(':')
        if get_rank() != int(rank) or runner.iter != int(at_iter):
            return
        if action == 'raise':
            raise RuntimeError(f'injected failure on rank {rank} at iteration {at_iter}')
        if action == 'kill':
            os.kill(os.getpid(), signal.SIGKILL)
        if action == 'hang':
            Path(runner.work_dir, f'fault_hang_rank{rank}').touch()
            time.sleep(3600)
        raise ValueError(f'{ENV}: unknown action {action!r}')

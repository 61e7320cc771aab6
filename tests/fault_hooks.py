"""Fault injection for the reliability tests (imported through a config's
``custom_imports``; never part of the package).

``VATTN_TEST_FAULT=ACTION:RANK:ITER`` makes rank RANK, just before training
iteration ITER (0-based), ``raise`` an exception, ``kill`` itself with SIGKILL
``hang`` (sleep; it writes ``<work_dir>/fault_hang_rank<RANK>`` first so a
test knows it got there), make the first loss term of that iteration ``nan``,
or SIGKILL itself during the next checkpoint save (``killsave-POINT``: see
:func:`kill_during_next_save`).
"""
import os
import signal
import time
from pathlib import Path

from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
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
        if action == 'nan':
            return poison_next_loss(runner.model.module if is_model_wrapper(runner.model)
                                    else runner.model)
        if action.startswith('killsave-'):
            return kill_during_next_save(action[len('killsave-'):])
        if action == 'hang':
            Path(runner.work_dir, f'fault_hang_rank{rank}').touch()
            die_with_launcher()
            time.sleep(3600)
        raise ValueError(f'{ENV}: unknown action {action!r}')


def kill_during_next_save(point: str) -> None:
    """SIGKILL this process in the next checkpoint save, at ``point``:
    ``written`` (the temporary file written, not renamed yet), ``replaced``
    (renamed over the final name; its checksum and ``last_checkpoint`` not
    written yet) or ``rotating`` (all written; the oldest kept checkpoint not
    removed yet)."""
    from vattn_mm.engine.hooks import AtomicLocalBackend

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == 'rotating':
        AtomicLocalBackend.remove = die
        return
    if point not in ('written', 'replaced'):
        raise ValueError(f'{ENV}: unknown save point {point!r}')
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(dst).endswith('.pth') and point == 'written':
            die()
        real(src, dst, *args, **kwargs)
        if str(dst).endswith('.pth'):
            die()
    os.replace = replace


def die_with_launcher() -> None:
    """Have the kernel SIGKILL this process when its parent (torchrun's agent)
    ends: torchrun starts ranks in sessions of their own, so a hung rank the
    agent does not stop would otherwise outlive the job, and the test."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() == 1:   # the parent ended before the call
        os._exit(1)


def poison_next_loss(model) -> None:
    """The next ``model.loss`` call returns its first loss term times NaN."""
    original = model.loss

    def poisoned(*args, **kwargs):
        del model.loss  # the class's method again
        losses = original(*args, **kwargs)
        name = next(k for k in losses if 'loss' in k)
        value = losses[name]
        losses[name] = [v * float('nan') for v in value] if isinstance(value, list) \
            else value * float('nan')
        return losses
    model.loss = poisoned

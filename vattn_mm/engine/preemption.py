"""Stopping cleanly when a cluster takes the machine back.

SLURM sends SIGTERM when it preempts a job, and ahead of the time limit when
asked (``srun --signal=TERM@120``, what ``tools/slurm_train.sh`` asks); torchrun
sends it to its ranks when it is stopped.  Without a handler the process dies
mid-iteration and the run resumes from its last interval checkpoint.
:class:`PreemptionHook` (added by ``SafeRunner``) instead lets the iteration
running when the signal comes finish, writes a checkpoint of it through the
run's checkpoint hook (atomic, with its checksum) and exits with
:data:`PREEMPTED_EXIT_CODE`, which ``tools/slurm_train.sh`` answers with a
requeue; ``--resume`` then continues from that checkpoint.  The ranks of a
distributed run agree on the stop at every iteration (one rank's signal stops
all of them after the same iteration).  Signals that come while it finishes
and saves, SIGINT included, are held off until the checkpoint is written.

Resumed from such a checkpoint, a run ends exactly as one never stopped:
an iteration-based one (``IterBasedTrainLoop``) and an epoch-based one
stopped inside an epoch (``SafeRunner``'s
:class:`~vattn_mm.engine.loops.ResumableEpochBasedTrainLoop` continues the
epoch after the batches it trained).
"""
from __future__ import annotations

import os.path as osp
import signal
import threading
from typing import Optional, Sequence

import torch
from mmengine.dist import all_reduce, get_world_size, is_main_process
from mmengine.hooks import CheckpointHook, Hook
from mmengine.registry import HOOKS

from ..utils.atomic_io import atomic_write
from .finite import model_device
from .hooks import MID_EPOCH_TMPL

#: the exit status of a run stopped by a signal after writing its checkpoint
#: (128 + SIGTERM, what a shell reports for a process SIGTERM ended)
PREEMPTED_EXIT_CODE = 143


@HOOKS.register_module()
class PreemptionHook(Hook):
    """On one of ``signals`` (names, default SIGTERM), finish the iteration,
    write its checkpoint and exit with :data:`PREEMPTED_EXIT_CODE`."""

    priority = 'LOWEST'   # after the checkpoint hook: an interval checkpoint is not written twice

    def __init__(self, signals: Sequence[str] = ('SIGTERM',)) -> None:
        self.signals = [getattr(signal, name) for name in signals]
        self._received: Optional[int] = None
        self._previous: dict = {}

    def _on_signal(self, signum: int, frame) -> None:
        if self._received is None:
            self._received = signum

    def before_train(self, runner) -> None:
        self._received = None
        if threading.current_thread() is not threading.main_thread():
            runner.logger.warning('PreemptionHook: training runs outside the main thread, where '
                                  'signals cannot be handled; a SIGTERM ends it mid-iteration')
            return
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in self.signals}

    def after_train(self, runner) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _stop_agreed(self, runner) -> bool:
        stop = self._received is not None
        if get_world_size() > 1:
            flag = torch.tensor([float(stop)], device=model_device(runner))
            all_reduce(flag, op='max')
            stop = bool(flag.item())
        return stop

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if not self._stop_agreed(runner):
            return
        name = signal.Signals(self._received).name if self._received else 'another rank'
        held = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, *self.signals)} \
            if threading.current_thread() is threading.main_thread() else {}
        try:
            checkpoint = self._save(runner)
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
        runner.logger.warning(
            f'{name} received: stopped after iteration {runner.iter + 1}'
            + (f' with checkpoint {checkpoint}; resume with --resume' if checkpoint
               else ' without a checkpoint (the run has no checkpoint hook)')
            + f' (exit status {PREEMPTED_EXIT_CODE})')
        raise SystemExit(PREEMPTED_EXIT_CODE)

    @staticmethod
    def _save(runner) -> Optional[str]:
        """Write the checkpoint of the iteration just finished (unless the
        checkpoint hook wrote it already); its path."""
        hook = next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)
        if hook is None:
            return None
        step = runner.iter + 1
        if not hook.by_epoch:
            name = hook.filename_tmpl.format(step)
            if not (hook.last_ckpt and osp.basename(hook.last_ckpt) == name):
                hook._save_checkpoint_with_step(runner, step, dict(epoch=runner.epoch, iter=step))
            return hook.last_ckpt
        # an epoch-based hook names checkpoints by epoch: this one is in the middle of one
        name = MID_EPOCH_TMPL.format(step)
        runner.save_checkpoint(hook.out_dir, name, save_optimizer=hook.save_optimizer,
                               save_param_scheduler=hook.save_param_scheduler, by_epoch=False,
                               backend_args=hook.backend_args)
        path = hook.file_backend.join_path(hook.out_dir, name)
        if is_main_process():
            atomic_write(osp.join(runner.work_dir, 'last_checkpoint'), str(path).encode())
        return path

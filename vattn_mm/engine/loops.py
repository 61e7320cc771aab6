"""An epoch-based training loop that resumes inside an epoch.

mmengine's ``EpochBasedTrainLoop`` resumed from a checkpoint written in the
middle of an epoch (a preemption's, or an iteration-interval one) trains that
whole epoch again: its first batches twice, and ``max_epochs`` then ends
later than the uninterrupted run.  :class:`ResumableEpochBasedTrainLoop`
(``SafeRunner`` builds it for ``EpochBasedTrainLoop`` / ``by_epoch=True``)
draws and drops the batches of the interrupted epoch already trained, as
mmengine's ``IterBasedTrainLoop`` does after a resume, and trains on from the
next one; the sampler's order for the epoch (``set_epoch``) is the one the
uninterrupted run drew.
"""
from __future__ import annotations

from mmengine.registry import LOOPS
from mmengine.runner import EpochBasedTrainLoop

#: the hook method the loop calls after dropping the trained batches, before
#: drawing the first one it trains (``RandomStateHook`` restores generators there)
AFTER_RESUME_SKIP = 'after_resume_skip'


@LOOPS.register_module()
class ResumableEpochBasedTrainLoop(EpochBasedTrainLoop):
    """mmengine's ``EpochBasedTrainLoop`` (same arguments) that continues an
    epoch where a checkpoint written inside it stopped."""

    def trained_in_epoch(self) -> int:
        """Batches of the current epoch trained before this loop started
        (non-zero only right after resuming inside an epoch; at most an epoch,
        for a checkpoint of a run whose epochs had another length, e.g. on
        another number of processes)."""
        length = len(self.dataloader)
        return min(max(0, self._iter - self._epoch * length), length)

    def run_epoch(self) -> None:
        self.runner.call_hook('before_train_epoch')
        self.runner.model.train()
        batches = iter(self.dataloader)
        start = self.trained_in_epoch()
        if start:
            for _ in range(start):
                next(batches)
            self.runner.logger.info(f'Resumed inside epoch {self._epoch + 1}: drew and dropped '
                                    f'its {start} batches trained before')
            self.runner.call_hook(AFTER_RESUME_SKIP)
        for idx, data_batch in enumerate(batches, start):
            self.run_iter(idx, data_batch)
        self.runner.call_hook('after_train_epoch')
        self._epoch += 1


def resumable_loop_cfg(loop: dict) -> dict:
    """A train-loop config with mmengine's epoch-based loop replaced by
    :class:`ResumableEpochBasedTrainLoop`; other loops unchanged."""
    loop = dict(loop)
    if loop.get('type') in ('EpochBasedTrainLoop', EpochBasedTrainLoop):
        loop['type'] = ResumableEpochBasedTrainLoop
    elif 'type' not in loop and loop.get('by_epoch'):
        del loop['by_epoch']
        loop['type'] = ResumableEpochBasedTrainLoop
    return loop

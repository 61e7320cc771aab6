"""Random-number state in checkpoints, so that a resumed run is the run it
continues (docs/reliability.md, "What resume guarantees").

mmengine's checkpoints hold the model, optimizer, schedulers and message hub
but no generator state, and its ``IterBasedTrainLoop`` resumes the data
loader by drawing (and dropping) the batches already trained.  Everything
that draws random numbers after the data pipeline (RPN / RoI samplers,
dropout, drop path, torch-based augmentations) then continues from another
state.  :class:`RandomStateHook` stores every rank's Python, NumPy, torch CPU
and CUDA generator states and puts them back right before the first batch
after the skipped ones is drawn.
"""
from __future__ import annotations

import random
from typing import Callable, Iterator, List, Optional

import numpy as np
import torch
from mmengine.dist import all_gather_object, get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from .loops import ResumableEpochBasedTrainLoop

#: the checkpoint entry :class:`RandomStateHook` writes
CHECKPOINT_KEY = 'random_state'


def capture_random_state() -> dict:
    """This process's generator states (Python ``random``, NumPy's global
    generator, torch CPU and, once CUDA is in use, every CUDA device), as
    tensors, numbers and strings only: a checkpoint holding them still loads
    with ``torch.load(weights_only=True)``."""
    version, internal, gauss_next = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    state = dict(
        python=dict(version=version, internal=torch.tensor(internal, dtype=torch.int64),
                    gauss_next=gauss_next),
        numpy=dict(bit_generator=numpy_state['bit_generator'],
                   key=torch.from_numpy(numpy_state['state']['key'].astype(np.int64)),
                   pos=int(numpy_state['state']['pos']),
                   has_gauss=int(numpy_state['has_gauss']), gauss=float(numpy_state['gauss'])),
        torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict) -> List[str]:
    """Put back what :func:`capture_random_state` returned; returns the
    problems (empty when every generator was restored)."""
    python = state['python']
    random.setstate((python['version'], tuple(python['internal'].tolist()), python['gauss_next']))
    numpy = state['numpy']
    np.random.set_state(dict(
        bit_generator=numpy['bit_generator'],
        state=dict(key=numpy['key'].numpy().astype(np.uint32), pos=numpy['pos']),
        has_gauss=numpy['has_gauss'], gauss=numpy['gauss']))
    torch.set_rng_state(state['torch'].cpu())
    cuda = state.get('cuda')
    if cuda is None:
        return []
    if not torch.cuda.is_available():
        return ['the checkpoint holds CUDA generator states but CUDA is not available']
    if len(cuda) != torch.cuda.device_count():
        return [f'the checkpoint holds {len(cuda)} CUDA generator states, this process '
                f'sees {torch.cuda.device_count()} devices']
    torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
    return []


class _RestoreAfterSkip:
    """Wraps a train loop's data iterator: hands out ``skip`` batches (the
    ones mmengine draws and drops on resume), then calls ``restore`` before
    drawing the next one and puts the plain iterator back in the loop."""

    def __init__(self, loop, skip: int, restore: Callable[[], None]):
        self.loop, self.inner, self.skip, self.restore = loop, loop.dataloader_iterator, skip, restore

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        if self.skip > 0:
            self.skip -= 1
            return next(self.inner)
        self.restore()
        self.loop.dataloader_iterator = self.inner
        return next(self.inner)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Save every rank's random-number generator states into checkpoints and
    restore them on resume, so that a run killed at any point and resumed
    ends with the weights of the uninterrupted run (bit for bit on the CPU).

    - The state is taken after each training iteration (and epoch), after
      every other hook but the checkpoint hook, gathered from all ranks, and
      written by ``before_save_checkpoint`` as ``checkpoint['random_state']``
      (``dict(world_size, iter, ranks=[state of rank 0, ...])``).
    - Validation leaves the training generators as it found them (the state
      is put back after ``val``), so a resumed run, which does not repeat the
      validation before its checkpoint, draws what the uninterrupted run drew.
    - On resume each rank takes its own entry.  An iteration-based loop first
      draws and drops the batches already trained (mmengine; this also moves
      the sampler and the data workers' own generators on); the state is
      restored right before the next batch is drawn.  An epoch-based loop gets
      it before its next epoch starts or, resumed inside an epoch by
      :class:`~vattn_mm.engine.loops.ResumableEpochBasedTrainLoop`, once the
      batches already trained are drawn and dropped.
    - A checkpoint without the entry (written before vattn-mm saved it, or by
      another runner) resumes with a warning that the run is not exact.
    """

    priority = 85  # after every hook but CheckpointHook (VERY_LOW, 90) and LOWEST ones

    def __init__(self) -> None:
        self._taken: Optional[dict] = None
        self._outside_val: Optional[dict] = None
        self._pending: Optional[dict] = None

    # ----------------------------------------------------------------- saving
    def _take(self, runner, finished_iters: int) -> None:
        state = capture_random_state()
        world_size = get_world_size()
        ranks = all_gather_object(state) if world_size > 1 else [state]
        self._taken = dict(world_size=world_size, iter=finished_iters, ranks=ranks)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._take(runner, runner.iter + 1)  # the loop counts the iteration after its hooks

    def after_train_epoch(self, runner) -> None:
        self._take(runner, runner.iter)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        meta_iter = checkpoint.get('meta', {}).get('iter')
        if self._taken is not None and self._taken['iter'] == meta_iter:
            checkpoint[CHECKPOINT_KEY] = self._taken
        elif get_world_size() == 1:  # written elsewhere (rank 0 alone cannot gather then)
            state = self._outside_val or capture_random_state()
            checkpoint[CHECKPOINT_KEY] = dict(world_size=1, iter=meta_iter, ranks=[state])

    # ------------------------------------------------------- validation is neutral
    def before_val(self, runner) -> None:
        self._outside_val = capture_random_state()

    def after_val(self, runner) -> None:
        if self._outside_val is not None:
            restore_random_state(self._outside_val)
            self._outside_val = None

    # -------------------------------------------------------------- restoring
    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not getattr(runner, '_resume', False):
            return  # load_from: weights only, the run starts afresh
        saved = checkpoint.get(CHECKPOINT_KEY)
        if saved is None:
            runner.logger.warning(
                'The checkpoint holds no random-number state (written before vattn-mm '
                'saved it, or by another runner): the run resumes with fresh generator '
                'states, so it will not end bit-identical to an uninterrupted run.')
            return
        saved_seed = checkpoint.get('meta', {}).get('seed')
        if saved_seed is not None and saved_seed != getattr(runner, 'seed', saved_seed):
            runner.logger.warning(
                f'The checkpoint\'s run had seed {saved_seed}, this run\'s data loader was built '
                f'with seed {runner.seed} (set `randomness = dict(seed=...)` in the config): '
                'its sample order and data-worker seeds differ, the resumed run is not exact.')
        world_size = get_world_size()
        if saved['world_size'] != world_size:
            loader = getattr(getattr(runner, 'train_loop', None), 'dataloader', None)
            per_process = getattr(loader, 'batch_size', None)
            batch = (f'; the global batch is {per_process * world_size} samples, not the '
                     f'{per_process * saved["world_size"]} it was (scale the learning rate, e.g. '
                     'auto_scale_lr, or the per-process batch)') if per_process else ''
            runner.logger.warning(
                f'The checkpoint was written by {saved["world_size"]} processes, this run has '
                f'{world_size}: the weights, the optimizer and scheduler states and the iteration '
                'count continue exactly; the per-process random-number generators cannot be '
                'mapped onto another number of processes and are not restored, so the data '
                f'order, augmentations and drop path differ from an uninterrupted run{batch}.')
            return
        meta_iter = checkpoint.get('meta', {}).get('iter')
        if meta_iter is not None and meta_iter != saved['iter']:
            runner.logger.warning(
                f'The random-number state of the checkpoint was taken after iteration '
                f'{saved["iter"]}, the checkpoint is of iteration {meta_iter}: not restored.')
            return
        self._pending = dict(state=saved['ranks'][get_rank()], iter=saved['iter'])

    def _restore(self, runner) -> None:
        pending, self._pending = self._pending, None
        problems = restore_random_state(pending['state'])
        for problem in problems:
            runner.logger.warning(f'Random-number state only partly restored: {problem}.')
        runner.logger.info(f'Random-number state of iteration {pending["iter"]} restored.')

    def before_train_epoch(self, runner) -> None:
        if self._pending is None:
            return
        loop = runner.train_loop
        if hasattr(loop, 'dataloader_iterator'):  # IterBasedTrainLoop draws `iter` batches first
            loop.dataloader_iterator = _RestoreAfterSkip(loop, loop.iter,
                                                         lambda: self._restore(runner))
            return
        if isinstance(loop, ResumableEpochBasedTrainLoop):
            if loop.trained_in_epoch():
                return  # restored in after_resume_skip, once the trained batches are dropped
        elif runner.iter != runner.epoch * len(loop.dataloader):
            runner.logger.warning(
                f'Resumed at iteration {runner.iter}, inside epoch {runner.epoch}: '
                f'{type(loop).__name__} starts the epoch over, so the run is not exact '
                '(SafeRunner\'s ResumableEpochBasedTrainLoop continues it).')
        self._restore(runner)

    def after_resume_skip(self, runner) -> None:
        """Called by :class:`~vattn_mm.engine.loops.ResumableEpochBasedTrainLoop`
        after it dropped the batches trained before the checkpoint."""
        if self._pending is not None:
            self._restore(runner)

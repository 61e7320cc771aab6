"""Hooks a config names (or :class:`~vattn_mm.engine.SafeRunner` adds):
crash-safe checkpoint writing, checkpoints that load without an allow-list,
and exact whole-model loading for evaluation."""
from __future__ import annotations

import os
import os.path as osp
import re
from pathlib import Path
from typing import Mapping, Optional, Union

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend, register_backend
from mmengine.hooks import CheckpointHook, Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from ..backbones.loading import CheckpointMismatchError, LoadReport, extract_state_dict
from ..utils.atomic_io import TMP_PREFIX, atomic_write
from ..utils.checksum import CHECKPOINT_SUFFIX, write_checksum
from ..utils.checksum import SUFFIX as CHECKSUM_SUFFIX
from ..utils.safe_load import URI_SCHEME, plain_message_hub, restore_message_hub
from .finite import check_finite_weights

#: the file backend (``backend_args=dict(backend=...)``) that writes local files atomically
ATOMIC_BACKEND = 'atomic_local'
#: the name of a checkpoint written inside an epoch of an epoch-based run
#: (:class:`~vattn_mm.engine.PreemptionHook`'s); the next epoch checkpoint supersedes it
MID_EPOCH_TMPL = 'iter_{}.pth'


def checkpoint_name_pattern(template: str) -> re.Pattern:
    """The file names ``template`` (``'iter_{}.pth'``) gives, the step as group 1."""
    return re.compile(re.escape(template).replace(r'\{\}', r'(\d+)') + '$')


MID_EPOCH_NAME = checkpoint_name_pattern(MID_EPOCH_TMPL)


class AtomicLocalBackend(LocalBackend):
    """mmengine's local file backend with atomic ``put`` / ``put_text``
    (:func:`~vattn_mm.utils.atomic_io.atomic_write`); a checkpoint (``.pth``)
    gets its checksum file, which ``remove`` removes with it
    (:mod:`vattn_mm.utils.checksum`)."""

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        atomic_write(filepath, obj)
        if str(filepath).endswith(CHECKPOINT_SUFFIX):
            write_checksum(str(filepath), obj)

    def remove(self, filepath: Union[str, Path]) -> None:
        super().remove(filepath)
        if osp.isfile(f'{filepath}{CHECKSUM_SUFFIX}'):
            os.remove(f'{filepath}{CHECKSUM_SUFFIX}')

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        atomic_write(filepath, obj.encode(encoding))


register_backend(ATOMIC_BACKEND, AtomicLocalBackend)


@HOOKS.register_module()
class CrashSafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) that never has fewer good
    checkpoints on disk than it keeps.

    Local checkpoints are written through the ``'atomic_local'`` file backend
    (unless ``backend_args`` names another), ``last_checkpoint`` is replaced
    atomically, and the oldest kept checkpoint is removed only after both.
    Before training it removes what a process killed inside a save left: its
    temporary files and, on resume, checkpoints older than those it keeps.
    With ``save_best``, the previous best checkpoint is removed only after the
    new one is written.  An epoch checkpoint supersedes a checkpoint written
    inside an epoch (a preemption's), which it then removes.
    Weights holding NaN or infinite values are refused
    (:class:`~vattn_mm.engine.NonFiniteWeightsError`) before anything changes.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        local = self.out_dir is None or not URI_SCHEME.match(str(self.out_dir))
        if self.backend_args is None and self.file_client_args is None and local:
            self.backend_args = dict(backend=ATOMIC_BACKEND)

    def before_train(self, runner) -> None:
        super().before_train(runner)
        if is_main_process() and isinstance(self.file_backend, AtomicLocalBackend):
            self._remove_leftovers(runner)

    def _remove_leftovers(self, runner) -> None:
        """What a process killed while saving left: temporary files of
        :func:`~vattn_mm.utils.atomic_io.atomic_write`, and on resume,
        checkpoints of this run older than those it keeps (killed before it
        removed them)."""
        if not osp.isdir(self.out_dir):
            return
        pattern = checkpoint_name_pattern(self.filename_tmpl)
        oldest_kept = min(self.keep_ckpt_ids) if self.max_keep_ckpts > 0 and \
            getattr(self, 'keep_ckpt_ids', None) else None
        for name in os.listdir(self.out_dir):
            path = osp.join(self.out_dir, name)
            found = pattern.match(name)
            if name.startswith(TMP_PREFIX) and ('.pth' in name or 'last_checkpoint' in name):
                os.remove(path)
                runner.logger.info(f'Removed {path}, left by a save that did not finish')
            elif found and oldest_kept is not None and int(found.group(1)) < oldest_kept:
                self.file_backend.remove(path)
                runner.logger.info(f'Removed {path}: max_keep_ckpts={self.max_keep_ckpts} keeps '
                                   f'{list(self.keep_ckpt_ids)} (a save was stopped before it)')

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        ckpt_filename = self.filename_tmpl.format(step)
        if getattr(runner, 'model', None) is not None:  # before any bookkeeping changes
            check_finite_weights(runner.model, f'Checkpoint {ckpt_filename}')
        stale = self._rotate(runner, step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, ckpt_filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        runner.save_checkpoint(
            self.out_dir, ckpt_filename, self.file_client_args,
            save_optimizer=self.save_optimizer,
            save_param_scheduler=self.save_param_scheduler, meta=meta,
            by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        atomic_write(osp.join(runner.work_dir, 'last_checkpoint'), str(self.last_ckpt).encode())
        if stale is not None:
            if self.file_backend.isfile(stale):
                self.file_backend.remove(stale)
            elif self.file_backend.isdir(stale):  # deepspeed checkpoints are folders
                self.file_backend.rmtree(stale)
        if self.by_epoch and isinstance(self.file_backend, AtomicLocalBackend):
            for name in os.listdir(self.out_dir):
                if MID_EPOCH_NAME.match(name):
                    self.file_backend.remove(osp.join(self.out_dir, name))

    def _save_best_checkpoint(self, runner, metrics) -> None:
        """mmengine's, except that the previous best checkpoint is removed
        only after the new one is written (mmengine removes it first, so a
        failed save, e.g. on a full disk, would leave no best checkpoint)."""
        backend, removals = self.file_backend, []
        backend.remove = removals.append
        try:
            super()._save_best_checkpoint(runner, metrics)
        finally:
            del backend.remove   # the class's method again
        for path in removals:
            if backend.isfile(path):
                backend.remove(path)

    def _rotate(self, runner, step: int) -> Optional[str]:
        """mmengine's ``max_keep_ckpts`` bookkeeping; returns the checkpoint
        to remove once the new one is saved (``None`` if none)."""
        if self.max_keep_ckpts <= 0 or (self.keep_ckpt_ids and self.keep_ckpt_ids[-1] == step):
            return None
        stale = None
        if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
            stale = self.file_backend.join_path(
                self.out_dir, self.filename_tmpl.format(self.keep_ckpt_ids.popleft()))
        self.keep_ckpt_ids.append(step)
        runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        return stale if is_main_process() else None


@HOOKS.register_module()
class PlainMessageHubHook(Hook):
    """Write the message hub into checkpoints as plain lists and numbers, so
    that they load with ``torch.load(weights_only=True)`` and no allow-list
    (mmengine pickles ``HistoryBuffer`` objects, with numpy arrays and class
    attributes), and turn it back into ``HistoryBuffer`` objects on resume.
    A plain mmengine runner resumes such a checkpoint too, without the
    smoothed log history."""

    priority = 'VERY_LOW'  # after any hook that adds to the checkpoint

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if 'message_hub' in checkpoint:
            checkpoint['message_hub'] = plain_message_hub(checkpoint['message_hub'])

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if 'message_hub' in checkpoint:
            checkpoint['message_hub'] = restore_message_hub(checkpoint['message_hub'])


def check_checkpoint_fits(model, checkpoint: Mapping, source: Optional[str]) -> None:
    """Raise :class:`~vattn_mm.backbones.CheckpointMismatchError` unless the
    whole-model ``checkpoint`` (read from ``source``) fits ``model`` (or the
    model a wrapper holds) key by key and shape by shape."""
    sd = extract_state_dict(checkpoint, prefix='')   # the whole model: no prefix selected
    model = model.module if is_model_wrapper(model) else model
    report = LoadReport.compare(sd, model.state_dict(), 'whole-model')
    if not report.ok:
        raise CheckpointMismatchError(
            f'{source!r} does not fit the model of this config '
            f'({type(model).__name__}): {report.describe_problems()}. Is it a checkpoint '
            'of this config (same backbone family, variant and heads)?')


@HOOKS.register_module()
class ExactCheckpointHook(Hook):
    """Raise :class:`~vattn_mm.backbones.CheckpointMismatchError` before a
    loaded whole-model checkpoint that does not fit the model key by key and
    shape by shape reaches it (mmengine's ``load_from`` loads with
    ``strict=False``, so a checkpoint of another variant would only log a
    warning and the test evaluate random weights): :func:`check_checkpoint_fits`.
    ``tools/test.py`` adds it."""

    priority = 'VERY_HIGH'

    def after_load_checkpoint(self, runner, checkpoint: Mapping) -> None:
        check_checkpoint_fits(runner.model, checkpoint, runner.cfg.get('load_from'))

"""``runner_type = 'SafeRunner'``: mmengine's Runner with vattn-mm's protections;
``runner_type = 'SafeFlexibleRunner'``: mmengine's FlexibleRunner (FSDP and the other
strategies) with the same hooks, dataset checks and float32 mmcv ops."""
from __future__ import annotations

import os.path as osp
from contextlib import contextmanager, nullcontext
from typing import Dict, List, Optional, Union

from mmengine.config import Config
from mmengine.hooks import CheckpointHook, Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import RUNNERS
from mmengine.runner import FlexibleRunner, Runner
from mmengine.runner.checkpoint import _load_checkpoint_to_model, find_latest_checkpoint
from torch.utils.data import DataLoader

from ..utils.amp import float32_mmcv_ops
from ..utils.atomic_io import NO_SPACE, DiskFullError
from ..utils.checksum import (CorruptCheckpointError, checksum_problem, newest_good_checkpoint,
                              verify_checkpoint)
from ..utils.data_checks import check_not_empty, empty_dataset_error
from ..utils.safe_load import load_runner_checkpoint
from .disk_space import out_of_space_error, stop_on_full_disk
from .distributed import is_fsdp
from .finite import FiniteLossHook
from .hooks import CrashSafeCheckpointHook, PlainMessageHubHook
from .loops import resumable_loop_cfg
from .preemption import PreemptionHook
from .random_state import RandomStateHook
from .transforms import name_image_errors


def _hook_type(hook: Union[Hook, dict]) -> object:
    return hook.get('type') if isinstance(hook, dict) else type(hook)


class RunConfig(Config):
    """A runner's config whose ``pretty_text`` is formatted once for each
    content: mmengine's formats the whole config with yapf (0.4 s for the
    demo's) each time the runner logs it, dumps it, starts and writes a
    checkpoint."""

    @property
    def pretty_text(self) -> str:
        content = repr(self.to_dict())
        formatted = self.__dict__.get('_formatted')
        if formatted is None or formatted[0] != content:
            formatted = (content, Config.pretty_text.fget(self))
            super(Config, self).__setattr__('_formatted', formatted)  # Config's sets keys
        return formatted[1]

    @classmethod
    def of(cls, cfg):
        """``cfg`` (a Config) as a RunConfig; anything else as it is."""
        if not isinstance(cfg, Config) or isinstance(cfg, cls):
            return cfg
        run_cfg = cls.__new__(cls)
        run_cfg.__setstate__(cfg.__getstate__())
        return run_cfg


class _Protections:
    """What :class:`SafeRunner` and :class:`SafeFlexibleRunner` add to their
    mmengine runner: the crash-safe checkpoint hook, the hooks of
    ``vattn_runtime.py``, dataset checks and float32 mmcv ops (see
    :class:`SafeRunner`)."""

    def __init__(self, *args, cfg=None, **kwargs):
        super().__init__(*args, cfg=RunConfig.of(cfg), **kwargs)

    def register_hooks(self, default_hooks: Optional[Dict[str, Union[Hook, dict]]] = None,
                       custom_hooks: Optional[List[Union[Hook, dict]]] = None) -> None:
        default_hooks = dict(default_hooks or {})
        # mmengine's own default when the config names no checkpoint hook
        checkpoint = default_hooks.get('checkpoint', dict(type='CheckpointHook', interval=1))
        if checkpoint is not None and _hook_type(checkpoint) in ('CheckpointHook', CheckpointHook):
            default_hooks['checkpoint'] = dict(checkpoint, type=CrashSafeCheckpointHook)
        custom_hooks = list(custom_hooks or [])
        for hook in (PlainMessageHubHook, RandomStateHook, FiniteLossHook, PreemptionHook):
            if not any(_hook_type(h) in (hook.__name__, hook) for h in custom_hooks):
                custom_hooks.append(dict(type=hook))
        super().register_hooks(default_hooks, custom_hooks)

    def build_train_loop(self, loop):
        """mmengine's, with an epoch-based loop that resumes inside an epoch
        (:class:`~vattn_mm.engine.loops.ResumableEpochBasedTrainLoop`)."""
        return super().build_train_loop(resumable_loop_cfg(loop) if isinstance(loop, dict) else loop)

    @classmethod
    def build_dataloader(cls, dataloader: Union[DataLoader, dict], seed: Optional[int] = None,
                         diff_rank_seed: bool = False) -> DataLoader:
        """mmengine's ``build_dataloader`` with the dataset checked for samples
        and its image loaders naming undecodable files."""
        try:
            loader = super().build_dataloader(dataloader, seed, diff_rank_seed)
        except ValueError as err:
            dataset_cfg = dataloader.get('dataset') if isinstance(dataloader, dict) else None
            empty = empty_dataset_error(dataset_cfg) if isinstance(dataset_cfg, dict) else None
            if empty is not None:
                raise empty from err
            raise
        check_not_empty(loader.dataset)
        name_image_errors(loader.dataset)
        return loader

    def _resume_command(self) -> str:
        """``tools/train.py`` resuming this run from a checkpoint ``{}``."""
        config = getattr(self.cfg, 'filename', None) or 'CONFIG'
        return f'python tools/train.py {config} --work-dir {self.work_dir} --resume {{}}'

    def build_logger(self, *args, **kwargs):
        """mmengine's, with log files that stop the run when the disk is full
        (:mod:`vattn_mm.engine.disk_space`)."""
        logger = super().build_logger(*args, **kwargs)
        stop_on_full_disk(logger, self.work_dir, self._resume_command())
        return logger

    @contextmanager
    def _run_scope(self):
        """Float32 mmcv ops where configured; a full disk met while writing
        logs or scalars named as :class:`~vattn_mm.utils.DiskFullError`."""
        with float32_mmcv_ops() if self.cfg.get('float32_mmcv_ops', False) else nullcontext():
            try:
                yield
            except DiskFullError:
                raise
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
                raise out_of_space_error(self.work_dir, self._resume_command(),
                                         f'the logs and scalars under {self.log_dir}', err) from err

    def train(self):
        with self._run_scope():
            return super().train()

    def val(self) -> dict:
        with self._run_scope():
            return super().val()

    def test(self) -> dict:
        with self._run_scope():
            return super().test()


@RUNNERS.register_module()
class SafeRunner(_Protections, Runner):
    """mmengine's ``Runner`` (same config) that

    - reads local checkpoints and ``http(s)://`` URLs (``load_from``, resume,
      ``tools/test.py``) with :func:`~vattn_mm.utils.load_checkpoint_file`:
      weights-only with the OpenMMLab allow-list, full unpickling only for
      files trusted one by one; a URL is downloaded once into the torch hub
      cache (:func:`~vattn_mm.utils.cached_download`);
    - builds mmengine's ``CheckpointHook`` as its crash-safe subclass
      :class:`~vattn_mm.engine.CrashSafeCheckpointHook` (same arguments) and
      adds :class:`~vattn_mm.engine.PlainMessageHubHook`, so that the
      checkpoints it writes are atomic, carry a checksum and load without an
      allow-list;
    - checks a checkpoint it reads against its checksum
      (:mod:`vattn_mm.utils.checksum`); an automatic resume whose latest
      checkpoint fails resumes from the newest one that verifies;
    - builds an epoch-based train loop as
      :class:`~vattn_mm.engine.ResumableEpochBasedTrainLoop`, which resumes
      inside an epoch;
    - adds :class:`~vattn_mm.engine.RandomStateHook` (exact resume),
      :class:`~vattn_mm.engine.FiniteLossHook` (stop at a NaN / inf loss) and
      :class:`~vattn_mm.engine.PreemptionHook` (a SIGTERM stops the run after
      the iteration with a checkpoint of it) when a config's ``custom_hooks``
      does not name them;
    - raises :class:`~vattn_mm.utils.EmptyDatasetError` for a dataset that
      ends up empty and wraps image loaders in
      :class:`~vattn_mm.engine.NameImageErrors`;
    - with ``float32_mmcv_ops = True`` in the config, runs mmcv's ``nms`` and
      ``roi_align`` in float32 under bfloat16 autocast while ``train()``,
      ``val()`` or ``test()`` runs (:func:`~vattn_mm.utils.float32_mmcv_ops`);
    - stops the run with :class:`~vattn_mm.utils.DiskFullError` (naming the
      folder, the latest checkpoint and the resume command) when the disk
      fills up while it writes logs or scalars;
    - refuses a config with a ``strategy`` (which ``Runner`` would ignore):
      that needs ``runner_type = 'SafeFlexibleRunner'``.
    """

    @classmethod
    def from_cfg(cls, cfg) -> 'SafeRunner':
        if cfg.get('strategy') is not None:
            raise ValueError(
                f"the config has a `strategy` ({cfg.strategy.get('type')}), which "
                f"runner_type='{cfg.get('runner_type', 'Runner')}' ignores: set "
                "runner_type = 'SafeFlexibleRunner' (configs/_base_/fsdp.py)")
        return super().from_cfg(cfg)

    def load_or_resume(self) -> None:
        """mmengine's, except that an automatic resume (``--resume`` without a
        file) whose latest checkpoint fails its checksum resumes from the
        newest one that verifies, with a warning."""
        if not self._has_loaded and self._resume and self._load_from is None:
            latest = find_latest_checkpoint(self.work_dir)
            problem = checksum_problem(latest) if latest and osp.isfile(latest) else None
            if problem:
                good = newest_good_checkpoint(osp.dirname(latest), other_than=latest)
                if good is None:
                    raise CorruptCheckpointError(
                        f'{problem}. No other checkpoint in {self.work_dir} verifies: '
                        'train from the start (without --resume)')
                self.logger.warning(f'{problem}. Resuming from the newest checkpoint that '
                                    f'verifies instead: {good}')
                self._load_from = good
        super().load_or_resume()

    def load_checkpoint(self, filename: str, map_location='cpu', strict: bool = False,
                        revise_keys: list = [(r'^module.', '')]) -> dict:  # noqa: B006 (mmengine's)
        """``Runner.load_checkpoint`` with the file checked against its
        checksum (:func:`~vattn_mm.utils.checksum.verify_checkpoint`) and
        read by :func:`~vattn_mm.utils.load_runner_checkpoint`."""
        if osp.isfile(filename):
            verify_checkpoint(filename, self._resume_command() if self._resume else None)
        checkpoint = load_runner_checkpoint(filename, map_location)
        self.call_hook('after_load_checkpoint', checkpoint=checkpoint)
        model = self.model.module if is_model_wrapper(self.model) else self.model
        checkpoint = _load_checkpoint_to_model(model, checkpoint, strict, revise_keys=revise_keys)
        self._has_loaded = True
        self.logger.info(f'Load checkpoint from {filename}')
        return checkpoint


@RUNNERS.register_module()
class SafeFlexibleRunner(_Protections, FlexibleRunner):
    """mmengine's ``FlexibleRunner`` (same config: ``strategy = dict(type=
    'FSDPStrategy', ...)``, ``'DeepSpeedStrategy'``, ...) with the hooks, dataset
    checks and float32 mmcv ops of :class:`SafeRunner`.

    Checkpoints are written and read by the strategy, which calls mmengine's
    own writer and loader: the checkpoint hook's rotation is crash-safe, but a
    file is written in place (not atomically), and it is read by
    ``torch.load`` with torch's default ``weights_only=True`` and no
    allow-list (``--trust-checkpoint`` and URL caching do not apply).  The
    checkpoints it writes load so (:class:`~vattn_mm.engine.PlainMessageHubHook`).

    Gradient clipping by norm (``optim_wrapper.clip_grad``) is refused under
    ``FSDPStrategy`` (and :class:`~vattn_mm.engine.ResumableFSDPStrategy`): mmengine's ``OptimWrapper`` clips each rank's gradient
    shard by that shard's norm, so the ranks' weights would drift apart.
    """

    @classmethod
    def from_cfg(cls, cfg) -> 'SafeFlexibleRunner':
        strategy = cfg.get('strategy') or {}
        clip = (cfg.get('optim_wrapper') or {}).get('clip_grad') or {}
        if is_fsdp(strategy) and clip and clip.get('type', 'norm') == 'norm':
            raise ValueError(
                f'optim_wrapper.clip_grad={dict(clip)} under FSDPStrategy: mmengine clips each '
                'gradient shard by its own norm, not by the norm of the whole gradient; '
                'remove clip_grad (or train with DDP)')
        return super().from_cfg(cfg)

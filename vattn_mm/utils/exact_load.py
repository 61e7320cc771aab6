"""Evaluation loads a whole-model checkpoint exactly.

mmengine's ``load_from`` loads with ``strict=False``: a checkpoint of another
family or variant only logs a warning and the test then evaluates random
weights.  ``tools/test.py`` adds :class:`ExactCheckpointHook`, which refuses a
checkpoint whose keys or shapes differ from the model's, naming them.
"""
from __future__ import annotations

from typing import Mapping

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class ExactCheckpointHook(Hook):
    """Raise ``CheckpointMismatchError`` before a loaded checkpoint that does
    not fit the model key by key and shape by shape reaches it."""

    priority = 'VERY_HIGH'

    def after_load_checkpoint(self, runner, checkpoint: Mapping) -> None:
        from ..backbones.loading import CheckpointMismatchError, LoadReport
        sd = checkpoint.get('state_dict', checkpoint)
        sd = {k.removeprefix('module.'): v for k, v in sd.items()}
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        report = LoadReport('whole-model')
        for key, target in model.state_dict().items():
            if key not in sd:
                report.missing.append(key)
            elif tuple(sd[key].shape) != tuple(target.shape):
                report.mismatched.append(f'{key} (checkpoint {tuple(sd[key].shape)} vs model '
                                         f'{tuple(target.shape)})')
        report.unexpected = [k for k in sd if k not in model.state_dict()]
        if not report.ok:
            raise CheckpointMismatchError(
                f'{runner.cfg.get("load_from")!r} does not fit the model of this config '
                f'({type(model).__name__}): {report.describe_problems()}. Is it a checkpoint '
                'of this config (same backbone family, variant and heads)?')

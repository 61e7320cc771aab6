"""Stop a run at its first NaN or infinite loss, and never write a
checkpoint with non-finite weights (docs/reliability.md)."""
from __future__ import annotations

import math
from typing import Iterable, List, Mapping, Optional, Tuple

import torch
from mmengine.dist import all_gather_object, all_reduce, get_world_size
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


class NonFiniteLossError(FloatingPointError):
    """A training iteration produced a NaN or infinite loss."""


class NonFiniteWeightsError(FloatingPointError):
    """A checkpoint would hold NaN or infinite weights."""


def non_finite_terms(log_vars: Mapping) -> List[Tuple[str, float]]:
    """``(name, value)`` of the loss terms of a train step's output (the
    entries whose name contains ``loss``, what mmengine sums) that are not
    finite."""
    bad = []
    for name, value in log_vars.items():
        if 'loss' not in name:
            continue
        value = float(value.detach().float().sum()) if isinstance(value, torch.Tensor) else value
        if isinstance(value, (int, float)) and not math.isfinite(value):
            bad.append((name, value))
    return sorted(bad, key=lambda term: term[0] == 'loss')  # the terms first, then their sum


def non_finite_tensors(state_dict: Mapping[str, torch.Tensor]) -> List[str]:
    """Names of the floating-point tensors of ``state_dict`` holding a NaN or
    an infinity."""
    return [name for name, tensor in state_dict.items()
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point()
            and not bool(torch.isfinite(tensor).all())]


def check_finite_state_dict(state_dict: Mapping[str, torch.Tensor], what: str) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the tensors of
    ``state_dict`` that are not finite (``what``: e.g.
    ``'Checkpoint iter_8.pth'``)."""
    bad = non_finite_tensors(state_dict)
    if bad:
        raise NonFiniteWeightsError(
            f'{what} not written: {len(bad)} weight tensors hold NaN or infinite values, '
            f'e.g. {", ".join(bad[:5])}. The last checkpoint written stays the latest one.')


def check_finite_weights(model: torch.nn.Module, what: str) -> None:
    """:func:`check_finite_state_dict` of ``model`` (unwrapped from DDP)."""
    model = model.module if is_model_wrapper(model) else model
    check_finite_state_dict(model.state_dict(), what)


def model_device(runner) -> torch.device:
    """Where the run's model is (the device of a collective's tensor)."""
    model = runner.model.module if is_model_wrapper(runner.model) else runner.model
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device('cpu')


def _dynamic_loss_scaler(optim_wrapper) -> Optional[object]:
    """The ``GradScaler`` of an ``AmpOptimWrapper(loss_scale='dynamic')``
    (mmengine keeps ``_scale_update_param`` for a fixed scale), else None."""
    scaler = getattr(optim_wrapper, 'loss_scaler', None)
    if scaler is None or not scaler.is_enabled():
        return None
    return scaler if getattr(optim_wrapper, '_scale_update_param', None) is None else None


def _describe(terms: Iterable[Tuple[str, float]]) -> str:
    return ', '.join(f'{name}={value}' for name, value in terms)


@HOOKS.register_module()
class FiniteLossHook(Hook):
    """Stop training at the first iteration whose loss is NaN or infinite,
    with :class:`NonFiniteLossError` naming the iteration and the loss terms
    that were not finite.

    It runs before the logger and checkpoint hooks, so no checkpoint of that
    iteration is written and the last good one stays the latest; in a
    distributed run every rank stops with the same message, naming the ranks
    whose loss was not finite (the verdict is all-reduced).  With a
    dynamic loss scale (``AmpOptimWrapper(loss_scale='dynamic')``) an
    overflow makes the ``GradScaler`` skip the step and lower the scale: that
    is expected, not fatal; the skipped steps are counted and logged as
    ``skipped_steps``.
    """

    priority = 'VERY_HIGH'

    def __init__(self) -> None:
        self.skipped_steps = 0
        self._scale_before: Optional[float] = None

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        scaler = _dynamic_loss_scaler(runner.optim_wrapper)
        self._scale_before = None if scaler is None else float(scaler.get_scale())

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        bad = non_finite_terms(outputs or {})
        scaler = _dynamic_loss_scaler(runner.optim_wrapper)
        if scaler is not None and self._scale_before is not None:
            if float(scaler.get_scale()) < self._scale_before:  # GradScaler skipped the step
                self.skipped_steps += 1
                runner.logger.warning(
                    f'Iteration {runner.iter + 1}: non-finite gradients under the dynamic loss '
                    f'scale, optimizer step skipped, scale {self._scale_before:g} -> '
                    f'{float(scaler.get_scale()):g}'
                    + (f' (loss terms {_describe(bad)})' if bad else ''))
                bad = []
            runner.message_hub.update_scalar('train/skipped_steps', self.skipped_steps)
        where = ''
        if get_world_size() > 1:
            flag = torch.tensor([float(bool(bad))], device=model_device(runner))
            all_reduce(flag)
            if flag.item():   # every rank learns which ranks and terms, for one message
                found = all_gather_object(bad)
                ranks = [rank for rank, terms in enumerate(found) if terms]
                where = f' on rank {", ".join(map(str, ranks))} of {len(found)}'
                bad = [term for rank in ranks for term in found[rank]]
        if bad:
            last = runner.message_hub.get_info('last_ckpt')
            raise NonFiniteLossError(
                f'Training stopped at iteration {runner.iter + 1} (of {runner.max_iters}): '
                f'loss terms not finite{where}: {_describe(bad)}. '
                + (f'The latest checkpoint is still {last}.' if last else
                   'No checkpoint was written before.')
                + ' Lower the learning rate, clip gradients (optim_wrapper.clip_grad) or '
                'check the data of this iteration.')

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        check_finite_state_dict(
            checkpoint.get('state_dict', {}),
            f'Checkpoint of iteration {checkpoint.get("meta", {}).get("iter")}')

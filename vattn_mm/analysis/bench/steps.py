"""A case built for measuring: its model and one iteration of its mode
(:func:`build_steps`)."""
from __future__ import annotations

import importlib
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Callable

from .cases import Case, torch_dtype
from .runtimes import runtime


def flat_tensors(out: Any) -> list:
    """The tensors of a model output (tensor, or nested dict / list / tuple)."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in flat_tensors(item)]
    return []


@dataclass
class Steps:
    """A built case: its model, one iteration of its mode (a training step
    frees the previous gradients first, as optimizers' ``zero_grad`` does)
    and, in ``fwd`` mode, :meth:`deviation` from eager fp32."""

    model: Any
    step: Callable[[], None]
    eager_forward: Callable[[Any], Any]
    forward: Callable[[Any], Any]
    images: Any
    autocast: Callable[[], Any]
    #: the target's parts whose forward peaks are measured (eager only)
    parts: dict

    def deviation(self) -> float:
        """Largest |output - eager fp32 output| over the largest |eager fp32
        output|, over all output tensors (eval mode, no autograd)."""
        import torch
        with torch.no_grad():
            ref = flat_tensors(self.eager_forward(self.images))
            with self.autocast():
                out = flat_tensors(self.forward(self.images))
        if len(out) != len(ref) or not ref:
            raise RuntimeError(f'{len(out)} outputs but eager fp32 gives {len(ref)}')
        return max(float((o.float() - r.float()).abs().max()
                         / r.float().abs().max().clamp_min(1e-30)) for o, r in zip(out, ref))


def build_steps(case: Case) -> Steps:
    """Build the target under ``case.runtime``; return its :class:`Steps`."""
    import torch

    run = runtime(case.runtime)
    if case.mode not in run.modes:
        raise ValueError(f'runtime {case.runtime!r} cannot measure mode {case.mode!r} '
                         f'(it measures {run.modes})')
    eager = target_builder(case.builder)(case.target, with_cp=case.mode == 'train_cp',
                                         device=case.device)
    target = run.prepare(eager, case)
    model = target.model
    images = torch.randn(1, 3, *case.shape, device=case.device)
    amp = case.dtype != 'fp32'
    # (torch 2.1 refuses a float32 CPU autocast even when not enabled)
    autocast = (lambda: torch.autocast(torch.device(case.device).type,  # noqa: E731
                                       dtype=torch_dtype(case.dtype))) if amp else nullcontext
    if case.mode == 'fwd':
        model.eval()

        def step() -> None:
            with torch.no_grad(), autocast():
                target.forward(images)
    else:
        model.train()

        def step() -> None:
            model.zero_grad(set_to_none=True)
            with autocast():
                outs = flat_tensors(target.forward(images))
            loss = sum(t.float().sum() for t in outs if t.requires_grad)
            loss.backward()
    parts = getattr(eager, 'parts', {}) if target is eager else {}
    return Steps(model, step, eager.forward, target.forward, images, autocast, parts)


def target_builder(builder: str) -> Callable[..., Any]:
    """The function that builds a case's target (see :attr:`Case.builder`)."""
    if not builder:
        from vattn_mm.analysis import build_target
        return build_target
    module, _, name = builder.partition(':')
    if not module or not name:
        raise ValueError(f"builder must be 'module:function', got {builder!r}")
    return getattr(importlib.import_module(module), name)


def plain_twin(case: Case, model: Any) -> Callable[[], None]:
    """The training step of ``case.target`` without with_cp, with ``model``'s
    weights (the other side of a ``train_cp`` timing)."""
    twin = build_steps(replace(case, mode='train'))
    twin.model.load_state_dict(model.state_dict())
    return twin.step

"""Float16 / bfloat16 autocast against float32: outputs and gradients close,
every value finite (LiteMLA also with amplified queries, keys and values)."""
from __future__ import annotations

from typing import Iterable, Optional

import torch
from torch import nn

from vattn_mm.layers import MIXERS

#: autocast vs float32: mean |low - fp32| / mean |fp32| of the outputs, and
#: ||g_low - g_fp32|| / ||g_fp32|| of all parameter gradients together
OUTPUT_REL_TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
GRAD_REL_TOL = {torch.float16: 5e-2, torch.bfloat16: 2e-1}
#: LiteMLA's query / key / value projection is multiplied by this in the stress run
LITE_MLA_STRESS = 30.


def _loss(outs) -> torch.Tensor:
    outs = [outs] if isinstance(outs, torch.Tensor) else outs
    return sum(o.float().square().mean() for o in outs)


def _forward_backward(model: nn.Module, x: torch.Tensor, dtype: Optional[torch.dtype]):
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        outs = model(x)
    _loss(outs).backward()
    grads = [p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None]
    return [o.detach().float() for o in outs], torch.cat(grads)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace('torch.', '')


def check_autocast(model: nn.Module, x: torch.Tensor, dtypes: Iterable[torch.dtype],
                   finite_only: bool = False) -> dict:
    """Forward + backward in float32 and under autocast in each of ``dtypes``:
    finite, and within :data:`OUTPUT_REL_TOL` / :data:`GRAD_REL_TOL` of float32.
    In train mode, as AMP training runs (build the model without drop path)."""
    model.train()
    ref_outs, ref_grad = _forward_backward(model, x, None)
    metrics, problems = {}, []
    for dtype in dtypes:
        outs, grad = _forward_backward(model, x, dtype)
        name = _dtype_name(dtype)
        if not all(torch.isfinite(o).all() for o in outs) or not torch.isfinite(grad).all():
            problems.append(f'{name}: non-finite outputs or gradients')
            continue
        out_err = max(((o - r).abs().mean() / r.abs().mean().clamp_min(1e-12)).item()
                      for o, r in zip(outs, ref_outs))
        grad_err = ((grad - ref_grad).norm() / ref_grad.norm().clamp_min(1e-12)).item()
        metrics.update({f'{name} out': out_err, f'{name} grad': grad_err})
        if finite_only:
            continue
        if not out_err <= OUTPUT_REL_TOL[dtype]:
            problems.append(f'{name}: output error {out_err:.3g} > {OUTPUT_REL_TOL[dtype]}')
        if not grad_err <= GRAD_REL_TOL[dtype]:
            problems.append(f'{name}: gradient error {grad_err:.3g} > {GRAD_REL_TOL[dtype]}')
    if problems:
        raise AssertionError('; '.join(problems) + f' (metrics {metrics})')
    return metrics


def check_finite_under_autocast(model: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> dict:
    """Forward and backward under ``dtype`` autocast give finite outputs and
    gradients; reports the largest token-mixer output (the stage output is normalised)."""
    model.train()
    mixer_max = []
    mixer_types = tuple(MIXERS.values())
    hooks = [m.register_forward_hook(lambda m, i, o: mixer_max.append(o.detach().abs().max()))
             for m in model.modules() if isinstance(m, mixer_types)]
    try:
        outs, grad = _forward_backward(model, x, dtype)
    finally:
        for hook in hooks:
            hook.remove()
    bad = [i for i, o in enumerate(outs) if not torch.isfinite(o).all()]
    if bad or not torch.isfinite(grad).all():
        raise AssertionError(f'non-finite under {dtype}: outputs {bad}, '
                             f'{int((~torch.isfinite(grad)).sum())} gradient entries')
    return {'max |mixer out|': max(v.item() for v in mixer_max) if mixer_max else None}


def amplify_qkv(model: nn.Module, scale: float) -> int:
    """Multiply the weights of every ``qkv`` projection in ``model`` by ``scale``
    (large queries, keys and values); returns how many tensors changed."""
    changed = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if '.qkv.' in f'.{name}' and param.dim() > 1:
                param.mul_(scale)
                changed += 1
    if not changed:
        raise ValueError('no qkv projection weights found to amplify')
    return changed

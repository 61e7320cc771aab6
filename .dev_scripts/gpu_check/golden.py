"""Golden fixtures on the device: the official code's outputs in float32
without TF32, gradients against the CPU."""
from __future__ import annotations

import copy
import importlib.util
import math
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import torch
from torch import nn

from vattn_mm.backbones import backbone_class
from vattn_mm.layers import (PEG, AgentAttention, EfficientMultiHeadAttention,
                             ExternalAttention, ExternalAttentionUnit, LiteMLA,
                             MultiScalePoolingAttention, map_to_tokens, tokens_to_map)


def _golden_helpers():
    """tests/golden.py, where the fixture format lives beside the fixtures, loaded
    from its file (the check runs against the installed package, with no
    checkout folder on the import path)."""
    path = Path(__file__).resolve().parents[2] / 'tests' / 'golden.py'
    spec = importlib.util.spec_from_file_location('vattn_golden_fixtures', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_GOLDEN = _golden_helpers()
load_fixture, official_arch, write_released = (_GOLDEN.load_fixture, _GOLDEN.official_arch,
                                               _GOLDEN.write_released)
swin_attention, swin_block = _GOLDEN.swin_attention, _GOLDEN.swin_block

#: golden outputs on the device: max |diff| <= GOLDEN_TOL x max(1, max |reference|)
GOLDEN_TOL = 1e-4


@contextmanager
def exact_float32() -> Iterator[None]:
    """Float32 matmuls and convolutions without TF32 (cuDNN uses TF32 for
    float32 convolutions by default: about 1e-3 relative error)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision('highest')
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def max_scaled_error(outs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor]) -> float:
    """Largest max |out - ref| / max(1, max |ref|) over the outputs (NaN where
    any difference is NaN); shapes must agree."""
    if len(outs) != len(refs):
        raise AssertionError(f'{len(outs)} outputs, expected {len(refs)}')
    worst = 0.
    for i, (out, ref) in enumerate(zip(outs, refs)):
        out = out.detach().float().cpu()
        if out.shape != ref.shape:
            raise AssertionError(f'output {i}: shape {tuple(out.shape)} != {tuple(ref.shape)}')
        err = (out - ref).abs().max().item() / max(1., ref.abs().max().item())
        if math.isnan(err):
            return err
        worst = max(worst, err)
    return worst


def _within(err: float, tol: float, what: str) -> dict:
    if not err <= tol:      # also catches NaN
        raise AssertionError(f'{what}: scaled error {err:.3g} > {tol}')
    return {f'{what} err': err}


def golden_backbone(rec: dict, directory: Path) -> nn.Module:
    """The fixture's backbone loading its checkpoint as released, through ``init_cfg``."""
    path = write_released(rec, directory)
    extra = {'out_indices': rec['arch']['out_indices']} if 'out_indices' in rec['arch'] else {}
    arch = official_arch(rec, drop=('out_indices', ))
    model = backbone_class(rec['family'])(arch=arch, drop_path_rate=0., **extra,
                                          init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    return model.eval()


def check_golden_backbone(path: Path, device: torch.device, tol: float = GOLDEN_TOL,
                          grads_vs_cpu: Optional[bool] = None) -> dict:
    """Outputs against the fixture's (the official code's) on ``device``;
    gradients: the input's against the fixture's where it has
    ``grad_weights``, else (``grads_vs_cpu``, default: off the CPU) the
    input's and every parameter's against the same model's on the CPU (whose
    outputs the suite holds to the official code), for a seeded random
    weighting of the outputs."""
    rec = load_fixture(path)
    with tempfile.TemporaryDirectory() as tmp:
        model = golden_backbone(rec, Path(tmp))
    weights = rec.get('grad_weights')
    if weights is None:
        generator = torch.Generator().manual_seed(0)
        weights = [torch.randn(o.shape, generator=generator) for o in rec['outputs']]

    def run(device):
        net = copy.deepcopy(model).to(device)
        x = rec['input'].to(device).requires_grad_()
        torch.manual_seed(0)
        with exact_float32():
            outs = net(x)
            sum((o * w.to(device)).sum() for o, w in zip(outs, weights)).backward()
        return outs, _input_and_parameter_grads(x, net)

    outs, grads = run(device)
    metrics = _within(max_scaled_error(outs, rec['outputs']), tol, 'output')
    if 'grad_weights' in rec:
        return dict(metrics, **_within(max_scaled_error(grads[:1], [rec['grad_input']]), tol,
                                       'grad'))
    return dict(metrics, **_grads_vs_cpu(grads, run, device, grads_vs_cpu, tol))


def _input_and_parameter_grads(x: torch.Tensor, module: nn.Module) -> list:
    return [x.grad] + [p.grad if p.grad is not None else torch.zeros_like(p)
                       for p in module.parameters()]


def _grads_vs_cpu(grads: list, run: Callable, device: torch.device,
                  grads_vs_cpu: Optional[bool], tol: float) -> dict:
    """``grads`` against ``run(cpu)``'s (off the CPU by default), else only finite."""
    if device.type != 'cpu' if grads_vs_cpu is None else grads_vs_cpu:
        cpu_grads = [g.detach().cpu() for g in run(torch.device('cpu'))[1]]
        return _within(max_scaled_error(grads, cpu_grads), tol, 'grad vs cpu')
    if not all(torch.isfinite(g).all() for g in grads):
        raise AssertionError('non-finite gradients')
    return {}


def _hw(rec: dict) -> tuple[int, int]:
    kwargs = rec['forward_kwargs']
    return tuple(kwargs['hw_shape']) if 'hw_shape' in kwargs else (kwargs['H'], kwargs['W'])


def _run_lite_mla(rec, x):
    module = LiteMLA.from_official(rec['checkpoint'], **official_arch(rec))
    tokens, hw = map_to_tokens(x)
    return lambda m: tokens_to_map(m(tokens.contiguous(), hw), hw), module


#: how each mixer fixture (``mixers/<mechanism>.pt``) runs: ``(rec, input on the
#: device) -> (call(module) -> output, module)``
MIXER_RUNNERS: dict[str, Callable] = {
    'agent_attention': lambda rec, x: (
        lambda m: m(x, _hw(rec)),
        AgentAttention.from_official(rec['checkpoint'], **official_arch(rec))),
    'cpvt_peg': lambda rec, x: (
        lambda m: x + m(x, _hw(rec)), PEG.from_official(rec['checkpoint'], **official_arch(rec))),
    'efficientvit_litemla': _run_lite_mla,
    'efficientvit_litemla_quadratic': _run_lite_mla,
    'external_attention': lambda rec, x: (
        lambda m: m(x),
        ExternalAttentionUnit.from_official(rec['checkpoint'], **official_arch(rec))),
    'external_attention_mh': lambda rec, x: (   # any (H, W) with H * W tokens
        lambda m: m(x, (1, x.shape[1])),
        ExternalAttention.from_official(rec['checkpoint'], **official_arch(rec))),
    'mvit_pooling_attention': lambda rec, x: (
        lambda m: m.attend(x, _hw(rec))[0],
        MultiScalePoolingAttention.from_official(rec['checkpoint'], **official_arch(rec))),
    'rest_emsa': lambda rec, x: (
        lambda m: m(x, _hw(rec)),
        EfficientMultiHeadAttention.from_official(rec['checkpoint'], **official_arch(rec))),
    'swin_shifted_block': lambda rec, x: (
        lambda m: swin_block(rec, m, x)[0], swin_attention(rec)),
}


def check_golden_mixer(path: Path, device: torch.device, tol: float = GOLDEN_TOL,
                       grads_vs_cpu: Optional[bool] = None) -> dict:
    """The mixer's output against the fixture's on ``device``; gradients as
    :func:`check_golden_backbone` does (against the CPU, off the CPU)."""
    rec = load_fixture(path)
    if rec['mechanism'] not in MIXER_RUNNERS:
        raise KeyError(f"no runner for mixer fixture {rec['mechanism']!r} in MIXER_RUNNERS")
    weight = torch.randn(rec['outputs'][0].shape, generator=torch.Generator().manual_seed(0))

    def run(device):
        x = rec['input'].to(device).requires_grad_()
        call, module = MIXER_RUNNERS[rec['mechanism']](rec, x)
        module = module.to(device).eval()
        with exact_float32():
            out = call(module)
            (out * weight.to(device)).sum().backward()
        return out, _input_and_parameter_grads(x, module)

    out, grads = run(device)
    metrics = _within(max_scaled_error([out], rec['outputs']), tol, 'output')
    return dict(metrics, **_grads_vs_cpu(grads, run, device, grads_vs_cpu, tol))

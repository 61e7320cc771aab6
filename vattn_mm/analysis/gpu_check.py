"""The GPU acceptance checks (``tools/analysis/gpu_check.py``): golden
fixtures on the device, float16 / bfloat16 autocast of every backbone and
mixer, training steps with their time and peak memory.  Every check runs
under a time budget and records ``passed``, ``failed`` or ``skipped``; one
failing check never stops the others.  :class:`Report` writes the JSON and
markdown report.  Sections that need a process or the ``tests`` folder (the
CUDA unit tests, the Mask R-CNN demo run) are passed in by the tool."""
from __future__ import annotations

import copy
import importlib.util
import json
import math
import platform
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import torch
from torch import nn

from ..backbones import backbone_class, build_backbone, registered_backbones
from ..layers import (MIXERS, PEG, AgentAttention, EfficientMultiHeadAttention, ExternalAttention,
                      ExternalAttentionUnit, LiteMLA, MultiScalePoolingAttention,
                      ShiftedWindowAttention, map_to_tokens, tokens_to_map)
from ..ops import FAST_PATHS, Switch, configure
from ..utils import atomic_write
from ..utils.compat import grad_scaler
from .bench.peers import build_peer_target, peers_of
from .targets import mixer_stage

PASSED, FAILED, SKIPPED = 'passed', 'failed', 'skipped'
#: golden outputs on the device: max |diff| <= GOLDEN_TOL x max(1, max |reference|)
GOLDEN_TOL = 1e-4
#: autocast vs float32: mean |low - fp32| / mean |fp32| of the outputs, and
#: ||g_low - g_fp32|| / ||g_fp32|| of all parameter gradients together
OUTPUT_REL_TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
GRAD_REL_TOL = {torch.float16: 5e-2, torch.bfloat16: 2e-1}
#: LiteMLA's query / key / value projection is multiplied by this in the stress run
LITE_MLA_STRESS = 30.
#: one arch per registered backbone for the full-size autocast checks
AUTOCAST_ARCHS = {'PVTv2': 'b2', 'P2T': 'small', 'QuadTree': 'b2', 'LITv2': 's',
                  'DilateFormer': 'small', 'FocalNet': 'tiny_srf', 'AgentPVT': 'small',
                  'EfficientViT': 'b2', 'TokenPyramid': 'b1'}
#: backbones whose autocast errors are reported but only finiteness is required:
#: randomly initialised EfficientViT's residual stream grows to ~1e6 in stage 4
#: (measured in float32), so its half-precision errors say little about trained weights
FINITE_ONLY = {'EfficientViT'}
#: the backbones whose training step is timed (issue #29)
TRAINING_ARCHS = {'PVTv2': 'b2', 'P2T': 'small', 'QuadTree': 'b2', 'LITv2': 's',
                  'DilateFormer': 'small', 'FocalNet': 'tiny_srf'}
TRAINING_SIZES = ((512, 512), (800, 1344))
#: a fast path is worth its default where, on vs off, it takes at most FASTER of the
#: time, or keeps at least MEMORY_SAVED less peak memory at most SLOWER_OK of the time
FASTER, MEMORY_SAVED, SLOWER_OK = 0.95, 0.10, 1.05
#: fixture ``arch`` entries that are no constructor arguments, or not arch keys
_ARCH_EXTRAS = frozenset({'norm_eps', 'num_classes', 'dense_class', 'cls_class', 'meaning',
                          'dense_path', 'cls_focal_windows'})


@dataclass
class Check:
    name: str
    status: str
    detail: str = ''
    seconds: float = 0.
    metrics: dict = field(default_factory=dict)


@dataclass
class Section:
    name: str
    title: str
    checks: list = field(default_factory=list)
    note: str = ''


class Report:
    """Checks grouped in sections, under a wall-clock budget: a check that
    would start after ``budget_s`` is recorded as skipped instead."""

    def __init__(self, device: str, quick: bool, budget_s: float):
        self.device, self.quick, self.budget_s = device, quick, budget_s
        self.start = time.perf_counter()
        self.sections: list[Section] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def section(self, name: str, title: str, note: str = '') -> Section:
        section = Section(name, title, note=note)
        self.sections.append(section)
        return section

    def run(self, section: Section, name: str, fn: Callable[[], Optional[dict]]) -> Check:
        """Run ``fn`` (returns metrics or None; raises on failure) as one check."""
        if self.elapsed() > self.budget_s:
            check = Check(name, SKIPPED, f'time budget ({self.budget_s:.0f} s) spent')
        else:
            start = time.perf_counter()
            try:
                metrics = fn() or {}
                check = Check(name, PASSED, metrics=metrics)
            except Skip as skip:
                check = Check(name, SKIPPED, str(skip))
            except Exception as exc:  # one failure is recorded, the rest still runs
                lines = traceback.format_exception_only(type(exc), exc)
                check = Check(name, FAILED, ''.join(lines).strip()[-2000:])
            check.seconds = round(time.perf_counter() - start, 3)
        section.checks.append(check)
        return check

    def counts(self) -> dict:
        out = {PASSED: 0, FAILED: 0, SKIPPED: 0}
        for section in self.sections:
            for check in section.checks:
                out[check.status] += 1
        return out

    def failed(self) -> bool:
        return self.counts()[FAILED] > 0

    def as_dict(self) -> dict:
        return dict(device=self.device, device_name=device_name(self.device), quick=self.quick,
                    budget_s=self.budget_s, elapsed_s=round(self.elapsed(), 1),
                    torch=torch.__version__, cuda=torch.version.cuda,
                    python=platform.python_version(),
                    counts=self.counts(), sections=[asdict(s) for s in self.sections])

    def markdown(self) -> str:
        data = self.as_dict()
        c = data['counts']
        lines = [f"# GPU acceptance check: {data['device_name']}", '',
                 f"torch {data['torch']} (CUDA {data['cuda']}), "
                 f"{'quick' if self.quick else 'full'} "
                 f"run, {data['elapsed_s']} s of a {self.budget_s:.0f} s budget: "
                 f"{c[PASSED]} passed, {c[FAILED]} failed, {c[SKIPPED]} skipped.", '']
        for section in self.sections:
            lines += [f'## {section.title}', '']
            if section.note:
                lines += [section.note, '']
            if not section.checks:
                continue
            lines += ['| check | status | s | result |', '|---|---|---|---|']
            for check in section.checks:
                result = ', '.join(f'{k} {_fmt(v)}' for k, v in check.metrics.items())
                text = (check.detail or result).replace('|', '/').replace('\n', ' ')
                lines.append(f'| {check.name} | {check.status} | {check.seconds:.1f} | {text} |')
            lines.append('')
        return '\n'.join(lines)

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = out / 'gpu_check.json', out / 'gpu_check.md'
        atomic_write(paths[0], (json.dumps(self.as_dict(), indent=1) + '\n').encode())
        atomic_write(paths[1], (self.markdown() + '\n').encode())
        return paths


class Skip(Exception):
    """A check that cannot run here (recorded as skipped, with the reason)."""


def _fmt(value: Any) -> str:
    return f'{value:.4g}' if isinstance(value, float) else str(value)


def device_name(device: str) -> str:
    if torch.device(device).type == 'cuda' and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f'{platform.processor() or platform.machine()} CPU'


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------ golden fixtures
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


def load_fixture(path: Path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=True)


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
    sd = rec['checkpoint']
    path = directory / f"{rec['family']}_{rec['case']}.pth"
    torch.save(sd if rec['checkpoint_wrapper'] is None else {rec['checkpoint_wrapper']: sd}, path)
    extra = {'out_indices': rec['arch']['out_indices']} if 'out_indices' in rec['arch'] else {}
    arch = {k: v for k, v in rec['arch'].items() if k not in _ARCH_EXTRAS and k != 'out_indices'}
    model = backbone_class(rec['family'])(arch=arch, drop_path_rate=0., **extra,
                                          init_cfg=dict(type='Pretrained', checkpoint=str(path)))
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


def _official(rec: dict) -> dict:
    return {k: v for k, v in rec['arch'].items() if k != 'meaning'}


def _hw(rec: dict) -> tuple[int, int]:
    kwargs = rec['forward_kwargs']
    return tuple(kwargs['hw_shape']) if 'hw_shape' in kwargs else (kwargs['H'], kwargs['W'])


def _run_lite_mla(rec, x):
    module = LiteMLA.from_official(rec['checkpoint'], **_official(rec))
    tokens, hw = map_to_tokens(x)
    return lambda m: tokens_to_map(m(tokens.contiguous(), hw), hw), module


def _run_swin_block(rec, x):
    """The official Swin block: our attention between the fixture's norms and MLP."""
    arch, sd = rec['arch'], rec['checkpoint']
    module = ShiftedWindowAttention(arch['dim'], arch['num_heads'], window_size=arch['window_size'],
                                    shift_size=arch['shift_size'], qkv_bias=arch['qkv_bias'])
    attn = {k[len('attn.'):]: v for k, v in sd.items() if k.startswith('attn.')}
    module.load_state_dict(ShiftedWindowAttention.convert_official_state_dict(attn))
    hw, c = tuple(arch['input_resolution']), arch['dim']
    weights = {k: v.to(x.device) for k, v in sd.items() if not k.startswith('attn.')}

    def block(m):
        norm = (lambda t, n: nn.functional.layer_norm(t, (c, ), weights[f'{n}.weight'],
                                                      weights[f'{n}.bias']))
        y = x + m(norm(x, 'norm1'), hw)
        hidden = nn.functional.gelu(nn.functional.linear(
            norm(y, 'norm2'), weights['mlp.fc1.weight'], weights['mlp.fc1.bias']))
        return y + nn.functional.linear(hidden, weights['mlp.fc2.weight'], weights['mlp.fc2.bias'])
    return block, module


#: how each mixer fixture (``mixers/<mechanism>.pt``) runs: ``(rec, input on the
#: device) -> (call(module) -> output, module)``
MIXER_RUNNERS: dict[str, Callable] = {
    'agent_attention': lambda rec, x: (
        lambda m: m(x, _hw(rec)),
        AgentAttention.from_official(rec['checkpoint'], **_official(rec))),
    'cpvt_peg': lambda rec, x: (
        lambda m: x + m(x, _hw(rec)), PEG.from_official(rec['checkpoint'], **_official(rec))),
    'efficientvit_litemla': _run_lite_mla,
    'efficientvit_litemla_quadratic': _run_lite_mla,
    'external_attention': lambda rec, x: (
        lambda m: m(x), ExternalAttentionUnit.from_official(rec['checkpoint'], **_official(rec))),
    'external_attention_mh': lambda rec, x: (   # any (H, W) with H * W tokens
        lambda m: m(x, (1, x.shape[1])),
        ExternalAttention.from_official(rec['checkpoint'], **_official(rec))),
    'mvit_pooling_attention': lambda rec, x: (
        lambda m: m.attend(x, _hw(rec))[0],
        MultiScalePoolingAttention.from_official(rec['checkpoint'], **_official(rec))),
    'rest_emsa': lambda rec, x: (
        lambda m: m(x, _hw(rec)),
        EfficientMultiHeadAttention.from_official(rec['checkpoint'], **_official(rec))),
    'swin_shifted_block': _run_swin_block,
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


# ------------------------------------------------------------------ autocast
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


# ------------------------------------------------------------------ training steps
def time_training_step(model: nn.Module, x: torch.Tensor, amp: bool, steps: int = 3,
                       warmup: int = 1, forward: Optional[Callable[[torch.Tensor], Any]] = None,
                       ) -> dict:
    """AdamW steps on ``sum(out^2).mean()``: the mean step time after ``warmup``
    and, on CUDA, ``torch.cuda.max_memory_allocated``.  AMP: float16 with a
    GradScaler on CUDA, bfloat16 on the CPU.  ``forward``: how to run
    ``model`` (default: call it)."""
    forward = forward or model
    device = x.device
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = grad_scaler(device.type, enabled=amp and dtype == torch.float16)
    model.train()
    losses = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            loss = _loss(forward(x))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.detach())

    seconds, peak, _ = _timed(step, device, steps, warmup)
    if not all(torch.isfinite(loss) for loss in losses):
        raise AssertionError(f'non-finite loss: {[loss.item() for loss in losses]}')
    metrics = {'step ms': round(seconds * 1e3, 1), 'loss': losses[-1].item()}
    if peak is not None:
        metrics['peak MiB'] = round(peak)
    return metrics


def _timed(step: Callable[[], Any], device: torch.device, steps: int,
           warmup: int) -> tuple[float, Optional[float], Any]:
    """Mean seconds of ``steps`` calls of ``step`` after ``warmup`` untimed
    ones, the peak memory of the timed calls on CUDA (MiB; ``None``
    elsewhere) and the last call's result."""
    for _ in range(warmup):
        step()
    synchronize(device)
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(steps):
        result = step()
    synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    peak = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == 'cuda' else None)
    return seconds, peak, result


def _training_row(build: Callable[[], tuple], device: torch.device, hw: tuple, amp: bool,
                  quick: bool) -> dict:
    """:func:`time_training_step` of ``build() -> (module, forward)`` (seeded)
    on a batch of 2 (quick: 1) images of size ``hw``; the device's cache is
    emptied after."""
    torch.manual_seed(0)
    model, forward = build()
    x = torch.randn(1 if quick else 2, 3, *hw, device=device)
    try:
        return time_training_step(model, x, amp, steps=1 if quick else 3, forward=forward)
    finally:
        del model, forward
        if device.type == 'cuda':
            torch.cuda.empty_cache()


# ------------------------------------------------------------------ fast paths on vs off
def fast_path_holders(archs: dict) -> dict:
    """``{path name: (family, arch)}``: for every registered fast path the
    first of ``archs`` whose backbone has a layer switching it (built on the
    meta device: no weights are made)."""
    holders = {}
    for family, arch in archs.items():
        with torch.device('meta'):
            model = build_backbone(family, arch)
        names = {v.name for m in model.modules() for v in vars(m).values()
                 if isinstance(v, Switch)}
        for name in sorted(names - set(holders)):
            holders[name] = (family, arch)
    return holders


def _measure(model: nn.Module, x: torch.Tensor, mode: str, amp: bool, steps: int,
             warmup: int) -> tuple[float, Optional[float], torch.Tensor]:
    """Mean seconds of ``steps`` forward (+ backward in ``'train'``) passes
    after ``warmup``, the peak memory of those steps on CUDA (MiB) and the
    first output of the last pass."""
    device = x.device
    dtype = torch.float16 if device.type == 'cuda' else torch.bfloat16
    model.train(mode == 'train')

    def step():
        model.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(mode == 'train'), \
                torch.autocast(device.type, dtype=dtype, enabled=amp):
            outs = model(x)
        if mode == 'train':
            _loss(outs).backward()
        return outs[0].detach()

    return _timed(step, device, steps, warmup)


def fast_path_verdict(time_ratio: float, memory_ratio: Optional[float]) -> str:
    """``'on'`` where the path wins (:data:`FASTER`, or :data:`MEMORY_SAVED`
    at :data:`SLOWER_OK`), else ``'off'``; ratios are on / off."""
    if time_ratio <= FASTER:
        return 'on'
    if memory_ratio is not None and memory_ratio <= 1 - MEMORY_SAVED and time_ratio <= SLOWER_OK:
        return 'on'
    return 'off'


def compare_fast_path(model: nn.Module, name: str, x: torch.Tensor, mode: str, amp: bool,
                      steps: int = 3, warmup: int = 1, rounds: int = 2) -> dict:
    """Path ``name`` on vs off in ``model`` (every other path at its
    default), alternating ``rounds`` times, the faster round of each kept:
    time, peak memory (CUDA), the float32 outputs' agreement and the verdict."""
    results = {True: [], False: []}
    for _ in range(rounds):
        for on in (True, False):
            configure(model, {name: on})
            results[on].append(_measure(model, x, mode, amp, steps, warmup))
    configure(model, None)
    (t_on, m_on, out_on), (t_off, m_off, out_off) = (min(results[k], key=lambda r: r[0])
                                                     for k in (True, False))
    metrics = {'on ms': round(t_on * 1e3, 2), 'off ms': round(t_off * 1e3, 2),
               'time on/off': round(t_on / t_off, 3)}
    memory_ratio = None
    if m_on is not None:
        memory_ratio = m_on / m_off
        metrics.update({'on MiB': round(m_on), 'off MiB': round(m_off),
                        'memory on/off': round(memory_ratio, 3)})
    if not amp:
        err = max_scaled_error([out_on], [out_off.float().cpu()])
        metrics.update(_within(err, GOLDEN_TOL, 'on vs off'))
    metrics['verdict'] = fast_path_verdict(t_on / t_off, memory_ratio)
    return metrics


def implied_defaults(checks: Iterable[Check]) -> dict:
    """``{path: 'on' | 'off' | 'no data'}`` from the fast-path section's
    checks (named ``'<path> <mode> <size> <precision>'``): ``'on'`` only where
    every measured row of the path says so and none failed."""
    rows: dict = {}
    for check in checks:
        rows.setdefault(check.name.split(' ')[0], []).append(check)
    out = {}
    for name, group in rows.items():
        measured = [c for c in group if c.status != SKIPPED]
        if not measured:
            out[name] = 'no data'
        elif all(c.status == PASSED and c.metrics.get('verdict') == 'on' for c in measured):
            out[name] = 'on'
        else:
            out[name] = 'off'
    return out


# ------------------------------------------------------------------ Mask R-CNN demo losses
#: total loss of the demo Mask R-CNN's first iterations on the CPU (the suite's demo
#: data: 8 training images of 128 x 128, batch 2, seed 0): 4.17 and 3.98 in iterations 1, 2
CPU_DEMO_LOSS = 4.1


def read_losses(work_dir: Path) -> list[float]:
    """The ``loss`` of every logged training iteration of an mmengine run in ``work_dir``."""
    files = sorted(Path(work_dir).glob('*/vis_data/scalars.json'))
    if not files:
        raise FileNotFoundError(f'no */vis_data/scalars.json under {work_dir}')
    losses = []
    for line in files[-1].read_text().splitlines():
        entry = json.loads(line)
        if 'loss' in entry and 'iter' in entry:       # not the validation entries
            losses.append(float(entry['loss']))
    if not losses:
        raise ValueError(f'{files[-1]} holds no training loss')
    return losses


def demo_loss_verdict(losses: Sequence[float], reference: float = CPU_DEMO_LOSS) -> dict:
    """Finite losses whose first iterations are within 2x of the CPU reference
    and, over 20 or more iterations, fall."""
    if not all(math.isfinite(v) for v in losses):
        raise AssertionError(f'non-finite demo loss: {list(losses)}')
    first = sum(losses[:5]) / len(losses[:5])
    if not reference / 2 <= first <= reference * 2:
        raise AssertionError(f'first losses average {first:.3g}, CPU reference {reference} '
                             '(more than 2x apart)')
    metrics = {'iterations': len(losses), 'first loss': first, 'last loss': losses[-1]}
    if len(losses) >= 20:
        last = sum(losses[-10:]) / 10
        if not last < first:
            raise AssertionError(f'loss did not fall: first {first:.3g}, last 10 {last:.3g}')
        metrics['last 10 mean'] = last
    return metrics


# ------------------------------------------------------------------ the run
def _on(device: torch.device, build: Callable[[], nn.Module]) -> nn.Module:
    model = build()
    if hasattr(model, 'init_weights'):
        model.init_weights()
    return model.to(device)


def _every_backbone_has_an_arch() -> dict:
    missing = sorted(set(registered_backbones()) - set(AUTOCAST_ARCHS))
    if missing:
        raise KeyError(f'no AUTOCAST_ARCHS entry for the registered backbones {missing}')
    return {'backbones': len(AUTOCAST_ARCHS)}


def run_checks(out: Path, device: str = 'cuda', quick: bool = False, budget_s: float = 420.,
               golden: Path = Path('tests/data/golden'),
               extra_sections: Sequence[tuple[str, str, Callable[[Report, Section], None]]] = (),
               ) -> Report:
    """Run every section, write ``gpu_check.json`` / ``gpu_check.md`` to
    ``out`` and return the report.  ``quick``: a subset at small sizes
    (the test suite's run).  ``extra_sections``: ``(name, title,
    fn(report, section))`` run after the built-in ones."""
    dev = torch.device(device)
    if dev.type == 'cuda' and not torch.cuda.is_available():
        raise RuntimeError('--device cuda but torch sees no GPU '
                           '(torch.cuda.is_available() is False)')
    golden = Path(golden)
    if not golden.is_dir():
        raise FileNotFoundError(f'golden fixture folder not found: {golden}')
    report = Report(device, quick, budget_s)
    low_dtypes = (torch.float16, torch.bfloat16)

    section = report.section('golden_backbones', 'Golden fixtures: backbones (float32)',
                             f'max |diff| <= {GOLDEN_TOL} x max(1, max |reference|), TF32 off; '
                             'outputs against the official code\'s; gradients of the input and '
                             'every parameter for a seeded weighting of the outputs against the '
                             'same model on the CPU (against the fixture where it has '
                             '`grad_weights`).')
    families = sorted(p for p in golden.iterdir()
                      if p.is_dir() and p.name not in ('keys', 'mixers'))
    cases = [case for family in families for case in sorted(family.glob('*.pt'))]
    for path in cases[:2] if quick else cases:
        report.run(section, f'{path.parent.name}/{path.stem}',
                   lambda path=path: check_golden_backbone(path, dev))

    section = report.section('golden_mixers', 'Golden fixtures: token mixers (float32)',
                             'as the backbones: outputs against the official code\'s, gradients '
                             'against the CPU.')
    mixer_cases = sorted((golden / 'mixers').glob('*.pt'))
    for path in mixer_cases[:2] if quick else mixer_cases:
        report.run(section, path.stem, lambda path=path: check_golden_mixer(path, dev))

    size, batch = ((64, 64), 1) if quick else ((512, 512), 2)
    section = report.section(
        'autocast_backbones', 'Autocast: every backbone, float16 and bfloat16 vs float32',
        f'{batch} x 3 x {size[0]} x {size[1]}, forward + backward; mean |low - fp32| / mean |fp32| '
        f'of the outputs <= {OUTPUT_REL_TOL[torch.float16]} (fp16) / '
        f'{OUTPUT_REL_TOL[torch.bfloat16]} (bf16); gradient vector relative error <= '
        f'{GRAD_REL_TOL[torch.float16]} / {GRAD_REL_TOL[torch.bfloat16]} (train mode, no drop '
        f'path; {", ".join(sorted(FINITE_ONLY))}: finite only, errors reported).')
    archs = {'PVTv2': 'b0'} if quick else AUTOCAST_ARCHS
    report.run(section, 'every backbone has an arch', _every_backbone_has_an_arch)
    for family, arch in archs.items():
        def autocast_backbone(family=family, arch=arch):
            torch.manual_seed(0)
            model = _on(dev, lambda: build_backbone(family, arch, drop_path_rate=0.))
            return check_autocast(model, torch.randn(batch, 3, *size, device=dev), low_dtypes,
                                  finite_only=family in FINITE_ONLY)
        report.run(section, f'{family}:{arch}', autocast_backbone)

    mixer_size = (64, 64) if quick else (512, 512)
    section = report.section(
        'autocast_mixers', 'Autocast: every token mixer stays finite in float16',
        f'one stride-4 stage of each mixer (`Mixer:<name>`), 2 x 3 x {mixer_size[0]} x '
        f'{mixer_size[1]}, forward + backward under float16 autocast; LiteMLA also with its '
        f'query / key / value projection x{LITE_MLA_STRESS:g} (sums over all tokens beyond the '
        'float16 range unless kept in float32).')
    runs = [(name, 1.) for name in sorted(MIXERS)] + [('LiteMLA', LITE_MLA_STRESS)]
    for name, scale in runs:
        def finite_mixer(name=name, scale=scale):
            torch.manual_seed(0)
            model = _on(dev, lambda: mixer_stage(name))
            if scale != 1:
                amplify_qkv(model, scale)
            x = torch.randn(2, 3, *mixer_size, device=dev)
            return check_finite_under_autocast(model, x, torch.float16)
        report.run(section, name if scale == 1 else f'{name} x{scale:g}', finite_mixer)

    section = report.section(
        'training_steps', 'Training steps: time and peak memory',
        f'AdamW on the backbone alone (no drop path), mean of {1 if quick else 3} step(s) after 1 '
        'warm-up; '
        'beside PVTv2-b2 and FocalNet-T, timm\'s version (`timm/...`) with the same weights and '
        'inputs (FocalNet: timm\'s stage maps plus our per-stage output norms); '
        'AMP = float16 autocast with '
        'a GradScaler on CUDA (bfloat16 on the CPU); peak = torch.cuda.max_memory_allocated.')
    train_archs = {'PVTv2': 'b0'} if quick else TRAINING_ARCHS
    sizes = ((64, 64), ) if quick else TRAINING_SIZES
    for family, arch in train_archs.items():
        for hw in sizes:
            for amp in (False, True):
                def train_step(family=family, arch=arch, hw=hw, amp=amp):
                    def build():
                        model = _on(dev, lambda: build_backbone(family, arch, drop_path_rate=0.))
                        return model, model
                    return _training_row(build, dev, hw, amp, quick)
                report.run(section, f"{family}:{arch} {hw[0]}x{hw[1]} {'amp' if amp else 'fp32'}",
                           train_step)

    # quick: one peer row proves timm builds and trains where the check runs
    peers = [peer for family, arch in TRAINING_ARCHS.items()
             for peer in peers_of(f'{family}:{arch}', ('timm', ))]
    for peer in peers[:1] if quick else peers:
        for hw in sizes:
            for amp in (False, ) if quick else (False, True):
                def peer_step(peer=peer, hw=hw, amp=amp):
                    if importlib.util.find_spec('timm') is None:
                        raise Skip('timm is not installed')

                    def build():
                        target = build_peer_target(peer, device=dev)
                        return target.model, target.forward
                    return _training_row(build, dev, hw, amp, quick)
                report.run(section, f"{peer} {hw[0]}x{hw[1]} {'amp' if amp else 'fp32'}",
                           peer_step)

    section = report.section(
        'fast_paths', 'Fast paths on vs off',
        f'each registered fast path switched on and off in the first backbone holding it (the '
        f'others at their defaults), {batch} image(s), where it acts (train: forward + backward; '
        f'inference: no autograd), float32 and AMP ({"bfloat16" if dev.type == "cpu" else "float16"} '
        f'autocast), {1 if quick else 3} step(s) after 1 warm-up, the faster of 2 alternating '
        f'rounds; float32 outputs on vs off within {GOLDEN_TOL}. Verdict `on`: at most {FASTER:g}x '
        f'the time, or {MEMORY_SAVED:.0%} less peak memory (torch.cuda.max_memory_allocated) at '
        f'most {SLOWER_OK:g}x the time; `off` otherwise: a path is on by default on CUDA only where '
        f'every one of its rows says `on`.')
    holders = fast_path_holders({'PVTv2': 'b0'} if quick else AUTOCAST_ARCHS)
    for name in sorted(FAST_PATHS) if not quick else sorted(holders):
        path = FAST_PATHS[name]
        for mode in path.modes:
            for hw in sizes:
                for amp in (False, True):
                    def fast_path(name=name, path=path, mode=mode, hw=hw, amp=amp):
                        if dev.type not in path.devices:
                            raise Skip(f'{name} runs on {list(path.devices)} only')
                        if name not in holders:
                            raise Skip(f'no backbone of {sorted(AUTOCAST_ARCHS)} holds {name}')
                        torch.manual_seed(0)
                        family, arch = holders[name]
                        model = _on(dev, lambda: build_backbone(family, arch, drop_path_rate=0.))
                        x = torch.randn(batch, 3, *hw, device=dev)
                        try:
                            return dict(compare_fast_path(model, name, x, mode, amp,
                                                          steps=1 if quick else 3),
                                        backbone=f'{family}:{arch}')
                        finally:
                            del model
                            if dev.type == 'cuda':
                                torch.cuda.empty_cache()
                    report.run(section, f"{name} {mode} {hw[0]}x{hw[1]} "
                                        f"{'amp' if amp else 'fp32'}", fast_path)
    defaults = implied_defaults(section.checks)
    section.note += (f' Implied defaults on {dev.type}: '
                     + ', '.join(f'`{k}` {v}' for k, v in sorted(defaults.items())) + '.')

    for name, title, fn in extra_sections:
        section = report.section(name, title)
        try:
            fn(report, section)
        except Exception as exc:   # recorded; the report is still written
            section.checks.append(Check(name, FAILED, f'{type(exc).__name__}: {exc}'))
    report.write(Path(out))
    return report

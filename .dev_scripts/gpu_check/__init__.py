"""The GPU acceptance checks (``.dev_scripts/run_gpu_check.py``): golden
fixtures on the device, float16 / bfloat16 autocast of every backbone and
mixer, training steps with their time and peak memory.  Every check runs
under a time budget and records ``passed``, ``failed`` or ``skipped``; one
failing check never stops the others.  :class:`Report` writes the JSON and
markdown report.  Sections that need a process or the ``tests`` folder (the
CUDA unit tests, the Mask R-CNN demo run) are passed in by the tool.

The framework is :mod:`.report`; the checks: :mod:`.golden` (fixtures),
:mod:`.precision` (autocast), :mod:`.timing` (training steps, fast paths),
:mod:`.demo` (the Mask R-CNN demo's losses); :func:`run_checks` puts them in
sections."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn

from vattn_mm.analysis.bench.peers import build_peer_target, peers_of
from vattn_mm.analysis.model_spec import mixer_stage
from vattn_mm.backbones import build_backbone, registered_backbones
from vattn_mm.checkpoint.released import load_model_index
from vattn_mm.layers import MIXERS
from vattn_mm.ops import FAST_PATHS

from .demo import CPU_DEMO_LOSS, demo_loss_verdict, read_losses
from .golden import (GOLDEN_TOL, check_golden_backbone, check_golden_mixer, golden_backbone,
                     max_scaled_error)
from .precision import (GRAD_REL_TOL, LITE_MLA_STRESS, OUTPUT_REL_TOL, amplify_qkv, check_autocast,
                        check_finite_under_autocast)
from .report import FAILED, PASSED, SKIPPED, Check, Report, Section, Skip, device_name
from .timing import (FASTER, MEMORY_SAVED, SLOWER_OK, compare_fast_path, fast_path_holders,
                     fast_path_verdict, implied_defaults, time_training_step, training_row)

__all__ = [
    'CPU_DEMO_LOSS', 'FAILED', 'FASTER', 'FINITE_ONLY', 'GOLDEN_TOL', 'GRAD_REL_TOL',
    'LITE_MLA_STRESS', 'MEMORY_SAVED', 'OUTPUT_REL_TOL', 'PASSED', 'SKIPPED', 'SLOWER_OK',
    'TRAINING_SIZES', 'Check', 'Report', 'Section', 'Skip', 'amplify_qkv',
    'check_autocast', 'check_finite_under_autocast', 'check_golden_backbone', 'check_golden_mixer',
    'compare_fast_path', 'demo_loss_verdict', 'device_name', 'fast_path_holders',
    'fast_path_verdict', 'full_size_archs', 'golden_backbone', 'implied_defaults',
    'max_scaled_error', 'read_losses', 'run_checks', 'time_training_step', 'training_row',
]

#: backbones whose autocast errors are reported but only finiteness is required:
#: randomly initialised EfficientViT's residual stream grows to ~1e6 in stage 4
#: (measured in float32), so its half-precision errors say little about trained weights
FINITE_ONLY = {'EfficientViT'}
TRAINING_SIZES = ((512, 512), (800, 1344))


def full_size_archs(timed: bool = False) -> dict[str, str]:
    """``{backbone: arch}``: the representative arch each registered backbone
    declares (``check_archs``), which the full run checks under autocast and
    with its fast paths on and off (each path in the first backbone holding
    it); ``timed``: only the backbones whose training step it times.  The
    released families come first, in the order of the model index, then the
    others."""
    released = [collection['Name'] for collection in load_model_index()[0]]
    backbones = sorted(registered_backbones().items(),
                       key=lambda item: released.index(item[0]) if item[0] in released
                       else len(released))
    return {name: cls.check_archs.representative for name, cls in backbones
            if cls.check_archs.timed or not timed}


def _on(device: torch.device, build: Callable[[], nn.Module]) -> nn.Module:
    model = build()
    if hasattr(model, 'init_weights'):
        model.init_weights()
    return model.to(device)


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
    archs = {'PVTv2': 'b0'} if quick else full_size_archs()
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
    train_archs = {'PVTv2': 'b0'} if quick else full_size_archs(timed=True)
    sizes = ((64, 64), ) if quick else TRAINING_SIZES
    for family, arch in train_archs.items():
        for hw in sizes:
            for amp in (False, True):
                def train_step(family=family, arch=arch, hw=hw, amp=amp):
                    def build():
                        model = _on(dev, lambda: build_backbone(family, arch, drop_path_rate=0.))
                        return model, model
                    return training_row(build, dev, hw, amp, quick)
                report.run(section, f"{family}:{arch} {hw[0]}x{hw[1]} {'amp' if amp else 'fp32'}",
                           train_step)

    # quick: one peer row proves timm builds and trains where the check runs
    peers = [peer for family, arch in full_size_archs(timed=True).items()
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
                    return training_row(build, dev, hw, amp, quick)
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
    holders = fast_path_holders(archs)
    for name in sorted(FAST_PATHS) if not quick else sorted(holders):
        path = FAST_PATHS[name]
        for mode in path.modes:
            for hw in sizes:
                for amp in (False, True):
                    def fast_path(name=name, path=path, mode=mode, hw=hw, amp=amp):
                        if dev.type not in path.devices:
                            raise Skip(f'{name} runs on {list(path.devices)} only')
                        if name not in holders:
                            raise Skip(f'no backbone of {sorted(archs)} holds {name}')
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

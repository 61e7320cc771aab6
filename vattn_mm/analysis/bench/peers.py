"""Peers: other libraries' versions of our backbones, built with the same
weights, for ``tools/analysis/benchmark.py --against`` (docs/benchmarks.md).

    timm  (optional, benchmark only: ``pip install --no-deps timm==1.0.31``, so
           that it never replaces the pinned torch): ``pvt_v2_b2``,
           ``focalnet_tiny_srf``
    mmdet (installed): ``PyramidVisionTransformerV2`` (b2)
    onnxruntime, inductor: our model itself, exported to ONNX and run by
           onnxruntime (checked against PyTorch at the case's size first), or
           compiled by ``torch.compile`` (:mod:`.runtimes`); every backbone

A peer is named ``'<library>/<our spec>'`` (``'timm/PVTv2:b2'``).  Its weights
are ours, converted to the official layout (``vattn_to_official``) and then
by the peer's own official-checkpoint converter; its forward returns the same
four maps as ours (FocalNet: timm's stage outputs with our per-stage output
norms, which the dense FocalNet adds).  :func:`compare` times ours and the
peers in one process, in alternating blocks; :func:`against` checks that
their outputs agree first.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any, Callable, Optional, Sequence

from .cases import Case
from .runtimes import runtime
from .steps import build_steps
from .timing import time_steps

#: blocks per implementation after the first, the implementations alternating
ROUNDS = 2
#: the :attr:`.cases.Case.builder` of a peer
BUILDER = 'vattn_mm.analysis.bench.peers:build_peer_target'

#: (library, our spec) -> builder of the peer module from our backbone
PEERS: dict[tuple[str, str], Callable[[Any], Any]] = {}
#: peer library -> the :data:`.runtimes.RUNTIMES` entry running our own model
RUNTIME_PEERS = {'onnxruntime': 'onnxruntime', 'inductor': 'compile'}
LIBRARIES = ('timm', 'mmdet', *RUNTIME_PEERS)


def _peer(library: str, spec: str):
    def register(fn):
        PEERS[library, spec] = fn
        return fn
    return register


def _official(backbone: Any, family: str) -> dict:
    from vattn_mm.checkpoint.convert import vattn_to_official
    return vattn_to_official(backbone.state_dict(), family, drop_dense_only=True)[0]


def _load(module: Any, state_dict: dict, allowed_missing: Sequence[str] = ()) -> None:
    """Load strictly but for ``allowed_missing`` (weights the peer's forward
    here does not use)."""
    result = module.load_state_dict(state_dict, strict=False)
    missing = sorted(set(result.missing_keys) - set(allowed_missing))
    if missing or result.unexpected_keys:
        raise RuntimeError(f'{type(module).__name__}: the converted weights do not fit: '
                           f'missing {missing[:5]}, unexpected {result.unexpected_keys[:5]}')


def _timm_model(name: str, **kwargs) -> Any:
    if importlib.util.find_spec('timm') is None:
        raise RuntimeError("--against timm needs timm: pip install --no-deps 'timm==1.0.31' "
                           '(without its dependencies, so that the pinned torch stays)')
    import timm
    return timm.create_model(name, pretrained=False, num_classes=0, **kwargs)


class _TimmFeatures:
    """A timm classifier's four stage maps (``forward_intermediates``), with
    optional per-stage output norms over channels."""

    def __init__(self, model: Any, norms: Optional[Sequence[Any]] = None):
        from torch import nn
        self.model = nn.ModuleDict(dict(net=model, norms=nn.ModuleList(norms or [])))

    def __call__(self, images: Any) -> list:
        maps = self.model['net'].forward_intermediates(images, intermediates_only=True)
        norms = self.model['norms']
        if not len(norms):
            return maps
        return [norm(m.permute(0, 2, 3, 1)).permute(0, 3, 1, 2) for norm, m in zip(norms, maps)]


@_peer('timm', 'PVTv2:b2')
def _timm_pvt_v2_b2(ours: Any) -> _TimmFeatures:
    from timm.models import pvt_v2
    model = _timm_model('pvt_v2_b2')
    _load(model, pvt_v2.checkpoint_filter_fn(_official(ours, 'PVTv2'), model))
    return _TimmFeatures(model)


@_peer('timm', 'FocalNet:tiny_srf')
def _timm_focalnet_tiny_srf(ours: Any) -> _TimmFeatures:
    import copy

    from timm.models import focalnet
    windows = [stage.blocks[0].attn.kernel_sizes[0] for stage in ours.stages]
    model = _timm_model('focalnet_tiny_srf', focal_windows=windows)
    _load(model, focalnet.checkpoint_filter_fn(_official(ours, 'FocalNet'), model),
          allowed_missing=('norm.weight', 'norm.bias'))     # the classifier's final norm
    return _TimmFeatures(model, [copy.deepcopy(stage.norm) for stage in ours.stages])


@_peer('mmdet', 'PVTv2:b2')
def _mmdet_pvt_v2_b2(ours: Any) -> Any:
    from mmdet.models.backbones.pvt import PyramidVisionTransformerV2, pvt_convert
    model = PyramidVisionTransformerV2(embed_dims=64, num_layers=[3, 4, 6, 3],
                                       num_heads=[1, 2, 5, 8])
    _load(model, pvt_convert(_official(ours, 'PVTv2')))
    return model


def peers_of(spec: str, libraries: Sequence[str]) -> list[str]:
    """The peer names of ``spec`` among ``libraries``."""
    unknown = sorted(set(libraries) - set(LIBRARIES))
    if unknown:
        raise ValueError(f'unknown peer libraries {unknown}; choose from {list(LIBRARIES)}')
    return [f'{lib}/{spec}' for lib in libraries
            if (lib, spec) in PEERS or lib in RUNTIME_PEERS]


def build_peer_target(name: str, *, with_cp: bool = False, device: Any = 'cpu'):
    """The :class:`vattn_mm.analysis.Target` of peer ``'<library>/<spec>'``
    (a case builder, :data:`BUILDER`),
    with the weights of our ``spec`` built after ``torch.manual_seed(0)``."""
    import torch
    from torch import nn

    from vattn_mm.analysis import Target, build_target
    library, _, spec = name.partition('/')
    if (library, spec) not in PEERS:
        raise ValueError(f'no peer {name!r}; peers: {sorted(f"{a}/{b}" for a, b in PEERS)}')
    if with_cp:
        raise ValueError(f'{name}: peers are measured without with_cp')
    torch.manual_seed(0)
    ours = build_target(spec, device=device).model
    peer = PEERS[library, spec](ours)
    if isinstance(peer, nn.Module):
        return Target(name, peer.to(device), peer)
    peer.model.to(device)
    return Target(name, peer.model, peer)


def _ours(spec: str, device: Any):
    import torch

    from vattn_mm.analysis import build_target
    torch.manual_seed(0)
    return build_target(spec, device=device)


def agreement(spec: str, peer: str, shape: tuple[int, int] = (224, 160)) -> float:
    """Largest deviation of the peer's outputs from ours, relative to the
    largest output magnitude of each map (eval, float32)."""
    import torch
    ours, other = _ours(spec, 'cpu'), build_peer_target(peer)
    ours.model.eval()
    other.model.eval()
    images = torch.randn(1, 3, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ours.forward(images), other.forward(images)
    return max(float((x - y).abs().max() / x.abs().max()) for x, y in zip(a, b))


def _as_peer(case: Case, name: str) -> Case:
    """``case`` measuring implementation ``name`` (ours or a peer)."""
    library = name.split('/', 1)[0]
    if name != case.target and library in RUNTIME_PEERS:
        return dataclasses.replace(case, runtime=RUNTIME_PEERS[library])
    return dataclasses.replace(case, target=name,
                               builder='' if name == case.target else BUILDER)


def _measures(name: str, mode: str) -> bool:
    """Whether peer ``name`` measures ``mode`` (onnxruntime: the forward only)."""
    library = name.split('/', 1)[0]
    return library not in RUNTIME_PEERS or mode in runtime(RUNTIME_PEERS[library]).modes


def compare(case: Case, peers: Sequence[str]) -> dict:
    """Time ours and each peer for ``case``, all built in this process:
    ``case.warmup`` untimed iterations each, then
    :func:`.timing.time_steps` (``case.iters``, the implementations in
    alternating blocks).  ``{name: {'ms': median, 'iqr_ms': spread, 'runs':
    timed iterations, 'first_s': the first iteration (a compile, where the
    runtime compiles)}}``, for a runtime peer's forward also ``'deviation'``
    (:meth:`.steps.Steps.deviation` from our eager forward at the case's size)."""
    import torch

    from .timing import clock
    if case.threads:
        torch.set_num_threads(case.threads)
    steps, extra = {}, {}
    for name in [case.target, *peers]:
        torch.manual_seed(0)
        built = build_steps(_as_peer(case, name))
        start = clock()
        built.step()
        extra[name] = dict(first_s=clock() - start)
        for _ in range(case.warmup - 1):
            built.step()
        if name != case.target and name.split('/', 1)[0] in RUNTIME_PEERS and case.mode == 'fwd':
            extra[name]['deviation'] = built.deviation()
        steps[name] = built.step
    return {name: dict(ms=t.median_s * 1e3, iqr_ms=t.iqr_s * 1e3, runs=t.runs, **extra[name])
            for name, t in time_steps(steps, case.iters, ROUNDS).items()}


def against(targets: Sequence[str], shapes: Sequence[tuple[int, int]], modes: Sequence[str],
            libraries: Sequence[str], run_compare: Callable[[Case, Sequence[str]], dict],
            peak_mib: Optional[Callable[[Case], float]], **case_kwargs) -> list[dict]:
    """For every target with a peer in ``libraries``: the outputs' agreement
    (a runtime peer's: at each shape, in :func:`compare`), then per shape and
    mode the times of :func:`compare` (``run_compare``: in a fresh process)
    and the peak memory of each implementation (``peak_mib``: a fresh process
    each; None: not measured)."""
    rows = []
    for target in targets:
        names = peers_of(target, libraries)
        if not names:
            print(f'[against] {target}: no peer in {list(libraries)} '
                  f'(peers: {sorted(f"{a}/{b}" for a, b in PEERS)})', flush=True)
            continue
        deviation = {name: agreement(target, name) for name in names
                     if name.split('/', 1)[0] not in RUNTIME_PEERS}
        for shape in shapes:
            for mode in modes:
                case = Case(target, shape, mode, **case_kwargs)
                measured = [name for name in names if _measures(name, mode)]
                if not measured:
                    continue
                print(f'[against] {target} {shape[0]}x{shape[1]} {mode}', flush=True)
                times = run_compare(case, measured)
                deviation.update({name: t['deviation'] for name, t in times.items()
                                  if 'deviation' in t})
                peak = {name: peak_mib(_as_peer(case, name)) if peak_mib else None
                        for name in [target, *measured]}
                rows.append(dict(target=target, shape=f'{shape[0]}x{shape[1]}', mode=mode,
                                 times=times, peak_mib=peak, deviation=dict(deviation)))
    return rows


def markdown(rows: Sequence[dict]) -> str:
    """One line per (target, shape, mode, peer): median times with their
    spread (IQR) and timed iterations, the peer's first iteration (its
    compile, for inductor), peaks, and the peer's over ours (> 1: ours is
    faster / smaller; ``-``: not measured)."""
    lines = ['| backbone | input | mode | peer | ours ms | peer ms | peer / ours time | '
             'ours IQR (ms) | peer IQR (ms) | runs (ours / peer) | peer first iteration (s) | '
             'ours MiB | peer MiB | peer / ours memory | max output deviation |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        ours, times, peaks = r['target'], r['times'], r['peak_mib']
        for name in times:
            if name == ours:
                continue
            mine, peer = times[ours], times[name]
            memory = (f'{peaks[ours]:.0f} | {peaks[name]:.0f} | {peaks[name] / peaks[ours]:.2f}x'
                      if peaks[ours] and peaks[name] else '- | - | -')
            deviation = r['deviation'].get(name)
            lines.append(
                f"| {ours} | {r['shape']} | {r['mode']} | {name.split('/')[0]} | "
                f"{mine['ms']:.1f} | {peer['ms']:.1f} | {peer['ms'] / mine['ms']:.2f}x | "
                f"{mine['iqr_ms']:.1f} | {peer['iqr_ms']:.1f} | {mine['runs']} / {peer['runs']} | "
                f"{peer.get('first_s', float('nan')):.1f} | {memory} | "
                f"{'-' if deviation is None else f'{deviation:.1e}'} |")
    return '\n'.join(lines)

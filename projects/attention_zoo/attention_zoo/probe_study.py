"""The zoo's probe study (projects/attention_zoo/README.md, "Probes"): the designs of three axes
(token mixer with the rest fixed; position encoding x tokenisation with
global attention; position terms inside windowed and pooling attention),
what each scale runs, the probe network (the skeleton's first two stages and a
linear per-pixel head), one training run, the runs' CSV and their tables.

A run trains from scratch on freshly drawn batches of a probe
(:mod:`.probes`) and scores mIoU on a fixed evaluation set, in the process
that calls :func:`run_probe` (``projects/attention_zoo/tools/zoo_workers.py`` starts one
process per design, :mod:`.runs`)."""
from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from .probes import confusion, get_probe, mean_iou, trivial_miou, variants_of
from .variants import scale_widths, variant_backbone, variants

#: the probe network's skeleton: the macro architecture's first two stages
#: (strides 4 and 8), one block each, so that a mixer's reach is the model's
CPU_ARCH = dict(embed_dims=[32, 64], depths=[1, 1], num_heads=[1, 2], mlp_ratios=[4, 4])
GPU_ARCH = dict(embed_dims=[64, 128], depths=[1, 1], num_heads=[1, 2], mlp_ratios=[4, 4])


@dataclass(frozen=True)
class Scale:
    """A study's size: widths, schedule and evaluation set."""

    arch: dict
    iters: int
    batch: int
    lr: float
    eval_images: int
    head_dims: int


SCALES = {
    'cpu': Scale(CPU_ARCH, iters=600, batch=8, lr=3e-3, eval_images=96, head_dims=32),
    'gpu': Scale(GPU_ARCH, iters=3000, batch=32, lr=1e-3, eval_images=256, head_dims=64),
    # the test suite's: a few steps, to exercise everything
    'smoke': Scale(CPU_ARCH, iters=3, batch=2, lr=2e-3, eval_images=2, head_dims=8),
}
#: the study's axes: the base probes each one runs, with their variants
#: (resolution transfer is the position and window axes' question)
AXES = {'mixer': ('long_range', 'scale_range', 'fine_structure'), 'position': ('resolution',),
        'window': ('resolution',)}
#: the position axis: tokenisers (backbone settings) and position encodings
TOKENISERS = {
    'overlap': dict(patch_embed=dict(type='OverlapPatchEmbed')),
    'nonoverlap': dict(patch_embed=dict(type='NonOverlapPatchEmbed')),
    'convstem': dict(stem=dict(type='ConvStem', hidden_dims=(16, 32))),
    'ceit': dict(stem=dict(type='CeiTImageToTokens', hidden_dims=16)),
}
POSITION_ENCODINGS = ('none', 'absolute', 'sincos', 'peg', 'cpe', 'pa', 'lepe', 'convffn')
#: the window axis: an attention (Swin windows that grow with the image,
#: Swin windows of a fixed size, MViTv2 pooling) + the position term inside
#: it, or a convolutional one beside it (``cpe``, ``convffn``)
WINDOW_DESIGNS = ('swin+none', 'swin+table', 'swin+cpb', 'swin+cpe', 'swin+convffn',
                  'swin_fixed+none', 'swin_fixed+table', 'mvit+none', 'mvit+decomposed')
#: per probe, the known pairs each axis must first separate (the README, "Probes")
DISCRIMINATION_PAIRS = {
    'resolution': (('position:absolute+overlap', 'position:cpe+overlap'),
                   ('window:swin+table', 'window:swin+convffn')),
    'long_range': (('mixer:swin', 'mixer:global'),),
    'scale_range': (('mixer:swin', 'mixer:global'),),
    'fine_structure': (('mixer:swin', 'mixer:global'),),
}
#: probes the CPU study leaves to the GPU scale unless named (``--probes``),
#: to stay within 90 minutes: ``scale_range`` (and its variant) ranks no pair
#: at the CPU scale and costs a third of its time; ``resolution_small`` and
#: ``fine_structure_thin`` do not separate their known pairs at the CPU
#: scale, so they cannot test a claim there; ``long_range_far_long`` (the
#: designs that split on ``long_range_far``, at twice the steps) costs about 10 min
CPU_LEFT_OUT = ('scale_range', 'scale_range_large', 'resolution_small', 'fine_structure_thin',
                'long_range_far_long')
#: the position axis's tokenisers at the CPU scale (the others at the GPU scale)
CPU_TOKENISERS = ('overlap', 'convstem')
#: the designs a variant re-runs at the CPU scale: those of its base probe's
#: supported claims and discrimination pair (the long schedules: the designs
#: whose seeds split at 600 steps, and ``swin``); the GPU scale runs every
#: design of the axis on every variant
_LOCAL = ('swin', 'dilated', 'focal', 'hilo', 'p2t')
_RESOLUTION_CLAIMS = tuple(f'position:{p}+{t}' for t in CPU_TOKENISERS
                          for p in ('none', 'absolute', 'sincos', 'cpe', 'convffn')) + tuple(
    f'window:{w}' for w in WINDOW_DESIGNS)
CPU_VARIANT_DESIGNS = {
    'resolution_small': _RESOLUTION_CLAIMS,
    'resolution_large': _RESOLUTION_CLAIMS,
    'long_range_far': tuple(f'mixer:{v}' for v in ('global', 'rest', 'litemla') + _LOCAL),
    'long_range_far_long': ('mixer:global', 'mixer:rest', 'mixer:swin'),
    'long_range_long': tuple(f'mixer:{v}' for v in (
        'sra', 'agent', 'external', 'mvit', 'quadtree_b', 'sra_linear', 'sra_peg', 'swin')),
    'fine_structure_thin': tuple(f'mixer:{v}' for v in (
        'global', 'swin', 'dilated', 'focal', 'p2t', 'mvit', 'rest', 'sra_peg')),
}


def axis_probes(axis: str) -> list[str]:
    """The probes of ``axis``: each base probe, then its variants."""
    return [q for p in AXES[axis] for q in (p, *variants_of(p))]


def planned(design: str, probe: str, scale: str, named: bool = False) -> bool:
    """Whether the study at ``scale`` runs ``design`` on ``probe`` (the CPU
    scale leaves :data:`CPU_LEFT_OUT` out unless the probe is ``named``,
    leaves the tokenisers outside :data:`CPU_TOKENISERS` out and runs a
    variant's :data:`CPU_VARIANT_DESIGNS` only)."""
    if scale != 'cpu':
        return True
    if (probe in CPU_LEFT_OUT and not named) or (
            design.startswith('position:') and design.rpartition('+')[2] not in CPU_TOKENISERS):
        return False
    return design in CPU_VARIANT_DESIGNS.get(probe, (design,))


def mixer_design(variant: str, arch: dict) -> dict:
    """Backbone config of zoo variant ``variant`` in the probe network: its
    mixer (and position) settings of the first stages, the width settings
    (:data:`~.variants.WIDTH_SETTINGS`) scaled by the probe's width over the
    macro architecture's in that stage (with one block a stage, Swin's
    blocks are unshifted: windows that never exchange)."""
    return scale_widths(variant_backbone(variant, quick=False), arch)


def position_design(position: str, tokeniser: str, arch: dict, train_side: int) -> dict:
    """Global attention with plain MLP FFNs, ``position`` and ``tokeniser``."""
    if position not in POSITION_ENCODINGS:
        raise ValueError(f'unknown position encoding {position!r}; choose from '
                         f'{POSITION_ENCODINGS}')
    if tokeniser not in TOKENISERS:
        raise ValueError(f'unknown tokeniser {tokeniser!r}; choose from {list(TOKENISERS)}')
    n = len(arch['depths'])
    cfg = dict(type='TokenPyramid', mixer=dict(type='GlobalSelfAttention'),
               ffn=dict(type='MLP'), **TOKENISERS[tokeniser])
    modules = dict(sincos='SinCosPosEmbed', peg='PEG', cpe='ConvPosEnc', pa='PixelAttention')
    if position == 'absolute':      # the table of the training grid, resized elsewhere
        cfg['position'] = [dict(type='AbsolutePosEmbed', grid_size=math.ceil(
            train_side / (4 * 2 ** i))) for i in range(n)]
    elif position in modules:
        cfg['position'] = dict(type=modules[position])
    elif position == 'lepe':
        cfg['mixer'] = dict(type='GlobalSelfAttention', lepe=True)
    elif position == 'convffn':
        cfg['ffn'] = dict(type='ConvFFN')
    return cfg


def window_design(name: str, arch: dict, train_side: int) -> dict:
    """One of :data:`WINDOW_DESIGNS` on the position axis's frame (MLP FFN,
    overlapping patches): Swin windows half the training grid's side (2 x 2
    windows; ``swin_fixed`` keeps that size at every side, ``swin`` grows
    them with the image, :func:`model_at_side`) or MViTv2 pooling attention
    (keys and values pooled by 4 and 2, its tables sized for the training
    grid and resized linearly to another)."""
    if name not in WINDOW_DESIGNS:
        raise ValueError(f'unknown window design {name!r}; choose from {WINDOW_DESIGNS}')
    attention, _, term = name.partition('+')
    grids = [math.ceil(train_side / (4 * 2 ** i)) for i in range(len(arch['depths']))]
    cfg = position_design(term if term in ('cpe', 'convffn') else 'none', 'overlap', arch,
                          train_side)
    if attention == 'mvit':
        cfg['mixer'] = [dict(type='MultiScalePoolingAttention', stride_kv=(4, 2, 1, 1)[i],
                             input_size=g, rel_pos=term == 'decomposed')
                        for i, g in enumerate(grids)]
    else:
        bias = term if term in ('table', 'cpb') else 'none'
        cfg['mixer'] = [dict(type='ShiftedWindowAttention', window_size=g // 2,
                             position_bias=bias) for g in grids]
    return cfg


def model_at_side(net, design: str, train_side: int, side: int):
    """The trained ``net`` as it runs at ``side``: itself, or for the
    growing-window designs (``window:swin+...``) a copy whose windows are
    scaled by ``side / train_side`` (the table resized bicubically, the CPB
    evaluated at the new offsets: :meth:`ShiftedWindowAttention.resize_window`)."""
    if side == train_side or not design.startswith('window:swin+'):
        return net
    import copy

    from vattn_mm.layers import ShiftedWindowAttention
    net = copy.deepcopy(net)
    for module in net.modules():
        if isinstance(module, ShiftedWindowAttention):
            module.resize_window(max(1, round(module.window_size * side / train_side)))
    return net


def designs(axis: str, variants_: Optional[Sequence[str]] = None,
            positions: Sequence[str] = POSITION_ENCODINGS,
            tokenisers: Sequence[str] = tuple(TOKENISERS),
            windows: Sequence[str] = WINDOW_DESIGNS) -> list[str]:
    """Names ``'<axis>:<design>'`` of an axis: the zoo variants (or
    ``variants_``), every pair of ``positions`` x ``tokenisers``, or
    ``windows`` (of :data:`WINDOW_DESIGNS`)."""
    if axis == 'mixer':
        return [f'mixer:{v}' for v in (variants_ or variants())]
    if axis == 'position':
        unknown = sorted(set(positions) - set(POSITION_ENCODINGS)) + sorted(
            set(tokenisers) - set(TOKENISERS))
        if unknown:
            raise ValueError(f'unknown position encodings / tokenisers {unknown}; choose from '
                             f'{POSITION_ENCODINGS} / {tuple(TOKENISERS)}')
        return [f'position:{p}+{t}' for t in tokenisers for p in positions]
    if axis == 'window':
        unknown = sorted(set(windows) - set(WINDOW_DESIGNS))
        if unknown:
            raise ValueError(f'unknown window designs {unknown}; choose from {WINDOW_DESIGNS}')
        return [f'window:{w}' for w in windows]
    raise ValueError(f'unknown axis {axis!r}; choose from {list(AXES)}')


def design_backbone(design: str, scale: Scale) -> dict:
    """The backbone config of ``'mixer:<variant>'``,
    ``'position:<encoding>+<tokeniser>'`` or ``'window:<attention>+<term>'``
    in the probe network."""
    axis, _, name = design.partition(':')
    if axis == 'mixer':
        if name not in variants():
            raise ValueError(f'unknown zoo variant {name!r}; choose from {variants()}')
        cfg = mixer_design(name, scale.arch)
    elif axis == 'position':
        position, _, tokeniser = name.partition('+')
        cfg = position_design(position, tokeniser, scale.arch, get_probe('resolution').train_side)
    elif axis == 'window':
        cfg = window_design(name, scale.arch, get_probe('resolution').train_side)
    else:
        raise ValueError(f'bad design {design!r}: use mixer:<variant>, '
                         f'position:<encoding>+<tokeniser> or window:<attention>+<term>')
    cfg.pop('init_cfg', None)
    cfg.update(arch=dict(scale.arch), out_indices=tuple(range(len(scale.arch['depths']))),
               drop_path_rate=0.0)
    return cfg


def build_probe_net(backbone: dict, num_classes: int, head_dims: int):
    """Backbone + a linear head: each map projected (1x1), upsampled to the
    first one's grid and summed, ReLU, 1x1 classifier, bilinear upsampling
    to the input."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from vattn_mm.backbones import TokenPyramid

    class ProbeNet(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = dict(backbone)
            if cfg.pop('type') != 'TokenPyramid':
                raise ValueError('a probe design must build a TokenPyramid')
            self.backbone = TokenPyramid(**cfg)
            self.backbone.init_weights()
            self.lateral = nn.ModuleList(nn.Conv2d(c, head_dims, 1)
                                         for c in self.backbone.out_channels)
            self.classifier = nn.Conv2d(head_dims, num_classes, 1)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            maps = self.backbone(images)
            size = maps[0].shape[-2:]
            fused = sum(F.interpolate(lat(m), size=size, mode='bilinear', align_corners=False)
                        if m.shape[-2:] != size else lat(m)
                        for lat, m in zip(self.lateral, maps))
            logits = self.classifier(F.relu(fused))
            return F.interpolate(logits, size=images.shape[-2:], mode='bilinear',
                                 align_corners=False)
    return ProbeNet()


@dataclass
class ProbeRun:
    """One design trained on one probe with one seed, per evaluated side
    (keys: the sides as strings): mIoU (``scores``), the trivial solution's
    mIoU and the foreground IoU (object vs background, any class)."""

    design: str
    probe: str
    seed: int
    scores: dict = field(default_factory=dict)
    trivial: dict = field(default_factory=dict)
    foreground: dict = field(default_factory=dict)
    params: int = 0
    steps: int = 0
    train_s: float = 0.
    final_loss: float = 0.
    #: the high-water mark of the resident size of the process that ran it, at its end
    peak_rss_mib: float = 0.
    error: str = ''


def class_weights(probe, seed: int = 0, images: int = 32):
    """Cross-entropy weights 1 / sqrt(frequency) (mean 1) from a sample of
    the training stream: rare classes do not leave every model at the
    all-background solution."""
    import numpy as np
    import torch
    labels = probe.sample(10_000 + seed, images)[1]
    freq = np.bincount(labels.ravel(), minlength=probe.num_classes) / labels.size
    w = 1 / np.sqrt(np.maximum(freq, 1e-4))
    return torch.tensor(w / w.mean(), dtype=torch.float32)


def probe_steps(probe, scale: Scale) -> int:
    """Training steps of ``probe`` at ``scale``: the scale's times the probe's ``schedule``."""
    return round(scale.iters * probe.schedule)


def run_probe(design: str, probe_name: str, seed: int, scale: Scale,
              device: str = 'cpu') -> ProbeRun:
    """Train ``design`` on ``probe_name`` from scratch (AdamW, linear warm-up
    then cosine decay, :func:`probe_steps` steps on fresh batches of the
    seed's stream) and score it on the evaluation set at every evaluated
    side."""
    import numpy as np
    import torch
    from torch.nn import functional as F
    probe = get_probe(probe_name)
    torch.manual_seed(seed)
    net = build_probe_net(design_backbone(design, scale), probe.num_classes,
                          scale.head_dims).to(device)
    iters = probe_steps(probe, scale)
    opt = torch.optim.AdamW(net.parameters(), lr=scale.lr, weight_decay=0.05)
    warmup = max(1, iters // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1., (i + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(1., i / iters))))
    weights = class_weights(probe).to(device)
    start = time.perf_counter()
    net.train()
    loss = torch.zeros(())
    for step in range(iters):
        images, labels = probe.sample(seed * 1_000_003 + step, scale.batch)
        logits = net(torch.from_numpy(images).to(device))
        loss = F.cross_entropy(logits, torch.from_numpy(labels).to(device), weight=weights)
        if not torch.isfinite(loss):
            raise FloatingPointError(f'{design} on {probe_name}, seed {seed}: loss {loss.item()} '
                                     f'at step {step}')
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
    train_s = time.perf_counter() - start
    net.eval()
    scores, trivial, found = {}, {}, {}
    with torch.no_grad():
        for side in probe.eval_sides:
            model = model_at_side(net, design, probe.train_side, side)
            images, labels = probe.sample(0, scale.eval_images, side, split='eval')
            conf = np.zeros((probe.num_classes,) * 2, np.int64)
            fg = np.zeros((2, 2), np.int64)
            for i in range(0, len(images), scale.batch):
                probs = model(torch.from_numpy(images[i:i + scale.batch]).to(device)).softmax(1)
                truth = labels[i:i + scale.batch]
                conf += confusion(probs.argmax(1).cpu().numpy(), truth, probe.num_classes)
                fg += confusion((probs[:, 0] < 0.5).cpu().numpy(), truth > 0, 2)
            scores[str(side)] = mean_iou(conf)
            trivial[str(side)] = trivial_miou(labels, probe.num_classes)
            found[str(side)] = float(fg[1, 1] / max(1, fg[1, 1] + fg[0, 1] + fg[1, 0]))
    return ProbeRun(design, probe_name, seed, scores, trivial, found,
                    sum(p.numel() for p in net.parameters()), iters, train_s, loss.item())


#: the foreground IoU below which a run counts as the trivial solution
TRIVIAL_FOREGROUND_IOU = 0.1


def is_trivial(run: ProbeRun) -> bool:
    """The run did not leave the trivial solution: at the training side it
    finds almost none of the objects (foreground = background probability
    below 1/2; IoU with all non-background pixels at most
    :data:`TRIVIAL_FOREGROUND_IOU`).  A design that finds the objects but
    cannot tell their classes apart (a local mixer on ``long_range``) is
    not trivial: that is what the probe measures."""
    side = str(get_probe(run.probe).eval_sides[0])
    return not run.error and run.foreground.get(side, 0.) <= TRIVIAL_FOREGROUND_IOU


def read_probe_csv(path: Path) -> list[ProbeRun]:
    """The runs the tool's probe part wrote (``zoo_probes.csv``)."""
    with open(path, newline='') as f:
        return [ProbeRun(r['design'], r['probe'], int(r['seed']), json.loads(r['scores']),
                         json.loads(r['trivial']), json.loads(r['foreground']),
                         int(r['params'] or 0), int(r.get('steps') or 0),
                         float(r['train_s'] or 0), float(r['final_loss'] or 0),
                         float(r['peak_rss_mib'] or 0), r['error'])
                for r in csv.DictReader(f)]


def merge_runs(studies: Iterable[Sequence[ProbeRun]]) -> list[ProbeRun]:
    """The runs of several studies, one per (design, probe, seed): a later
    study's run replaces an earlier one's (a rerun of one probe merged into
    a full study), in the order they first appear."""
    merged: dict = {}
    for runs in studies:
        for r in runs:
            merged[(r.design, r.probe, r.seed)] = r
    return list(merged.values())

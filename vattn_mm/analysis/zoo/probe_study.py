"""The zoo's probe study (docs/zoo.md, "Probes"): the designs of two axes
(token mixer with the rest fixed; position encoding x tokenisation with
global attention), the probe network (the skeleton's first two stages and a
linear per-pixel head), one training run, the runs' CSV and their tables.

A run trains from scratch on freshly drawn batches of a probe
(:mod:`.probes`) and scores mIoU on a fixed evaluation set, in the process
that calls :func:`run_probe` (``tools/analysis/zoo_workers.py`` starts one
process per design, :mod:`.runs`)."""
from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from .probes import PROBES, confusion, get_probe, mean_iou, trivial_miou
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
#: the study's two axes: the probes each one runs (resolution transfer is the
#: position axis's question)
AXES = {'mixer': ('long_range', 'scale_range', 'fine_structure'), 'position': ('resolution',)}
#: the position axis: tokenisers (backbone settings) and position encodings
TOKENISERS = {
    'overlap': dict(patch_embed=dict(type='OverlapPatchEmbed')),
    'nonoverlap': dict(patch_embed=dict(type='NonOverlapPatchEmbed')),
    'convstem': dict(stem=dict(type='ConvStem', hidden_dims=(16, 32))),
    'ceit': dict(stem=dict(type='CeiTImageToTokens', hidden_dims=16)),
}
POSITION_ENCODINGS = ('none', 'absolute', 'sincos', 'peg', 'cpe', 'pa', 'lepe', 'convffn')
#: the designs each probe is first shown to separate (docs/zoo.md, pilot)
DISCRIMINATION_PAIRS = {
    'resolution': ('position:absolute+overlap', 'position:cpe+overlap'),
    'long_range': ('mixer:swin', 'mixer:global'),
    'scale_range': ('mixer:swin', 'mixer:global'),
    'fine_structure': ('mixer:swin', 'mixer:global'),
}


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


def designs(axis: str, variants_: Optional[Sequence[str]] = None,
            positions: Sequence[str] = POSITION_ENCODINGS,
            tokenisers: Sequence[str] = tuple(TOKENISERS)) -> list[str]:
    """Names ``'<axis>:<design>'`` of an axis: the zoo variants (or
    ``variants_``), or every pair of ``positions`` x ``tokenisers``."""
    if axis == 'mixer':
        return [f'mixer:{v}' for v in (variants_ or variants())]
    if axis == 'position':
        unknown = sorted(set(positions) - set(POSITION_ENCODINGS)) + sorted(
            set(tokenisers) - set(TOKENISERS))
        if unknown:
            raise ValueError(f'unknown position encodings / tokenisers {unknown}; choose from '
                             f'{POSITION_ENCODINGS} / {tuple(TOKENISERS)}')
        return [f'position:{p}+{t}' for t in tokenisers for p in positions]
    raise ValueError(f'unknown axis {axis!r}; choose from {list(AXES)}')


def design_backbone(design: str, scale: Scale) -> dict:
    """The backbone config of ``'mixer:<variant>'`` or
    ``'position:<encoding>+<tokeniser>'`` in the probe network."""
    axis, _, name = design.partition(':')
    if axis == 'mixer':
        if name not in variants():
            raise ValueError(f'unknown zoo variant {name!r}; choose from {variants()}')
        cfg = mixer_design(name, scale.arch)
    elif axis == 'position':
        position, _, tokeniser = name.partition('+')
        cfg = position_design(position, tokeniser, scale.arch, get_probe('resolution').train_side)
    else:
        raise ValueError(f'bad design {design!r}: use mixer:<variant> or '
                         f'position:<encoding>+<tokeniser>')
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
            images, labels = probe.sample(0, scale.eval_images, side, split='eval')
            conf = np.zeros((probe.num_classes,) * 2, np.int64)
            fg = np.zeros((2, 2), np.int64)
            for i in range(0, len(images), scale.batch):
                probs = net(torch.from_numpy(images[i:i + scale.batch]).to(device)).softmax(1)
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

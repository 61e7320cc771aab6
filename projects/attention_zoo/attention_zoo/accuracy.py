"""The zoo's accuracy runs: a variant trained from scratch and tested on a demo
task (in a process of the tool's, :func:`train_and_test_here`), the runs'
CSV and their summary."""
from __future__ import annotations

import csv
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from typing import Optional

from .variants import (COMMON, CONFIGS, LIBRARY_CONFIGS, QUICK_ARCH, parse_spec,
                       variant_backbone)

#: task -> (demo recipe, metric keys reported by the evaluator, short names)
TASKS = {
    'seg': (CONFIGS / '_base_' / 'zoo_upernet_demo.py', {'mIoU': 'mIoU'}),
    'det': (LIBRARY_CONFIGS / '_base_' / 'maskrcnn_demo.py',
            {'coco/bbox_mAP': 'box AP', 'coco/segm_mAP': 'mask AP'}),
}


@dataclass
class Accuracy:
    """One training run of a variant on one demo task."""

    variant: str
    task: str
    seed: int
    metrics: dict
    train_s: float = 0.
    error: str = ''


def data_options(task: str, root: Path) -> dict:
    """``--cfg-options`` pointing a demo config at the demo data under ``root``."""
    if task == 'det':
        coco = f'{root}/coco/'
        opts = {f'{split}_dataloader.dataset.data_root': coco
                for split in ('train', 'val', 'test')}
        return opts | {f'{split}_evaluator.ann_file': f'{coco}annotations/instances_val.json'
                       for split in ('val', 'test')}
    return {f'{split}_dataloader.dataset.data_root': f'{root}/ade/'
            for split in ('train', 'val', 'test')}


def train_options(task: str, root: Path, iters: int, seed: int, quick: bool) -> dict:
    """The zoo's schedule: the demo recipe with ``iters`` iterations (warm-up
    and decay rescaled), one seed, no validation during training."""
    opts = data_options(task, root)
    warmup = max(1, iters // 10)
    opts.update({
        'train_cfg.max_iters': iters, 'train_cfg.val_interval': iters + 1,
        'param_scheduler.0.end': warmup, 'param_scheduler.1.begin': warmup,
        'param_scheduler.1.end': iters, 'randomness.seed': seed,
        'default_hooks.checkpoint.interval': iters, 'default_hooks.logger.interval': 10,
        'train_dataloader.num_workers': 0, 'train_dataloader.persistent_workers': False,
        'test_dataloader.num_workers': 0, 'test_dataloader.persistent_workers': False,
        'val_dataloader.num_workers': 0, 'val_dataloader.persistent_workers': False})
    if quick:
        opts['train_dataloader.batch_size'] = 2     # tiny widths: set by the worker
    return opts


def task_config(variant: str, task: str, *, quick: bool = False,
                cfg_options: Optional[dict] = None, work_dir: Optional[str] = None):
    """The training config of ``variant`` on the demo ``task`` (a key of
    :data:`TASKS`): the task's demo recipe with the variant's backbone (drop
    path 0) and the neck / head input widths it needs, then ``cfg_options``.
    ``projects/attention_zoo/configs/<variant>_{upernet,maskrcnn}_demo.py`` are these configs as
    files for ``tools/train.py``."""
    from mmengine.config import Config

    from vattn_mm.utils.config_loading import load_config
    cfg = load_config(str(TASKS[task][0]), cfg_options, work_dir)
    backbone = variant_backbone(parse_spec(variant)[0], quick)
    backbone['drop_path_rate'] = 0.0
    channels = (list(QUICK_ARCH['embed_dims']) if quick
                else Config.fromfile(str(COMMON)).backbone_channels)
    cfg.model.backbone = backbone
    if task == 'det':
        cfg.model.neck.in_channels = channels
    else:
        cfg.model.decode_head.in_channels = channels
        cfg.model.auxiliary_head.in_channels = channels[2]
    return cfg


def train_and_test_here(spec: dict) -> dict:
    """Train and test one (variant, task, seed) in this process."""
    import time

    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import torch

    import vattn_mm  # noqa: F401  (registers the backbones and the runner)
    from vattn_mm.utils.protections import use_protections
    if spec.get('threads'):
        torch.set_num_threads(spec['threads'])
    options = train_options(spec['task'], Path(spec['data_root']), spec['iters'], spec['seed'],
                            spec['quick'])
    cfg = task_config(spec['variant'], spec['task'], quick=spec['quick'], cfg_options=options,
                      work_dir=spec['work_dir'])
    use_protections(cfg)
    runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    start = time.perf_counter()
    runner.train()
    train_s = time.perf_counter() - start
    metrics = runner.test()
    return dict(metrics={k: float(v) for k, v in metrics.items() if isinstance(v, numbers.Real)},
                train_s=train_s)


def read_accuracy_csv(path: Path) -> list[Accuracy]:
    """The runs the tool's accuracy part wrote to ``path``
    (:func:`attention_zoo.study_report.write_dataclass_csv`)."""
    with open(path, newline='') as f:
        return [Accuracy(r['variant'], r['task'], int(r['seed']), json.loads(r['metrics']),
                         float(r['train_s'] or 0), r['error']) for r in csv.DictReader(f)]


def summarize_accuracy(runs: Sequence[Accuracy]) -> dict:
    """``{(variant, metric name): (mean, spread = max - min, runs)}``."""
    out: dict = {}
    for task, (_, keys) in TASKS.items():
        for variant in dict.fromkeys(r.variant for r in runs):
            done = [r for r in runs if r.variant == variant and r.task == task and not r.error]
            for key, name in keys.items():
                values = [r.metrics[key] for r in done if key in r.metrics]
                if values:
                    out[variant, name] = (sum(values) / len(values), max(values) - min(values),
                                          len(values))
    return out


def pareto_front(points: dict) -> list:
    """Names of the points ``{name: (latency, accuracy)}`` that no other point
    beats on both (lower latency, higher accuracy), by latency."""
    front = [n for n, (t, a) in points.items()
             if not any(t2 <= t and a2 >= a and (t2, a2) != (t, a)
                        for m, (t2, a2) in points.items() if m != n)]
    return sorted(front, key=lambda n: points[n][0])


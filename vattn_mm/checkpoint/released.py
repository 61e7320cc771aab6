"""The released official checkpoints and the published numbers, as the model
index (``model-index.yml`` + ``configs/metafiles/<family>.yml``, the OpenMMLab
format ``mim search`` reads) records them.

:func:`released_weights` reads the index of the installed package
(``vattn_mm/.mim/model-index.yml``) or, in a checkout, the repository's own.
Nothing is read at import time.
"""
from __future__ import annotations

import os.path as osp
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

#: task of the ImageNet records
CLASSIFICATION = 'Image Classification'
#: how a record's weights are obtained: ``direct``, a URL whose path ends with
#: the file name (``init_cfg`` can point at it); ``manual``, a page or a link
#: without a file name (Google Drive, Baidu, Tsinghua Cloud), to download by
#: hand; ``unpublished``: no address
DOWNLOAD_KINDS = ('direct', 'manual', 'unpublished')


@dataclass(frozen=True)
class ReleasedWeights:
    """One record of the model index.

    ``task`` is ``'Image Classification'`` for an official ImageNet
    checkpoint; otherwise the record is a dense config of ours (``config``)
    with the published results of the official model of that recipe
    (``metrics``, ``{'box AP': 45.3, 'mask AP': 41.2}``; empty where none is
    published) and the official dense checkpoint where one is released.
    ``official_config`` is the official config of that recipe at a pinned
    commit, ``official_values`` its recipe in the terms of
    :func:`vattn_mm.engine.recipe.resolved_recipe`, and ``deviations`` the
    keys where our config differs on purpose, with the reason;
    ``official_note`` says what else a reader of the official config must know
    (e.g. that it does not build as released).
    """

    name: str
    family: str
    backbone: str
    task: str
    dataset: str
    config: Optional[str] = None
    weights: Optional[str] = None
    file: Optional[str] = None
    download: Optional[str] = None
    resolution: Optional[int] = None
    metrics: dict = field(default_factory=dict)
    source: Optional[str] = None
    recipe: Optional[str] = None
    note: Optional[str] = None
    official_config: Optional[str] = None
    official_values: dict = field(default_factory=dict)
    deviations: dict = field(default_factory=dict)
    official_note: Optional[str] = None

    @property
    def pretraining(self) -> bool:
        """An ImageNet checkpoint (not a dense config's record)."""
        return self.task == CLASSIFICATION

    @property
    def url_names_file(self) -> bool:
        """``weights`` is a direct download whose URL path ends with ``file``:
        what ``init_cfg=dict(type='Pretrained', checkpoint=URL)`` can load."""
        if self.download != 'direct' or not self.weights or not self.file:
            return False
        return osp.basename(urllib.parse.urlsplit(self.weights).path) == self.file


def package_root() -> Path:
    return Path(__file__).resolve().parents[1]


def model_index_path() -> Path:
    """``vattn_mm/.mim/model-index.yml`` (an installed package) or the
    checkout's ``model-index.yml``."""
    candidates = [package_root() / '.mim' / 'model-index.yml',
                  package_root().parent / 'model-index.yml']
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError('no model index found; looked at ' + ', '.join(map(str, candidates)))


def _read_yaml(path: Path):
    import yaml
    try:
        with open(path, encoding='utf-8') as f:   # libyaml's safe loader where PyYAML has it
            return yaml.load(f, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))
    except yaml.YAMLError as err:
        raise ValueError(f'{path}: not valid YAML ({err})') from err


def load_model_index(path: Union[str, Path, None] = None) -> tuple[list[dict], list[dict]]:
    """The raw ``(collections, models)`` of a model index and every metafile it
    imports (paths relative to the index's folder)."""
    path = Path(path) if path is not None else model_index_path()
    index = _read_yaml(path) or {}
    collections, models = list(index.get('Collections') or []), list(index.get('Models') or [])
    for name in index.get('Import') or []:
        metafile = path.parent / name
        if not metafile.is_file():
            raise FileNotFoundError(f'{path} imports {name}, which does not exist ({metafile})')
        data = _read_yaml(metafile) or {}
        collections += data.get('Collections') or []
        models += data.get('Models') or []
    return collections, models


def _record(model: dict) -> ReleasedWeights:
    meta = model.get('Metadata') or {}
    results = model.get('Results') or []
    metrics: dict = {}
    for result in results:
        metrics.update(result.get('Metrics') or {})
    pretraining = any(r.get('Task') == CLASSIFICATION for r in results) or \
        str(meta.get('Training Data', '')).startswith('ImageNet')
    first = results[0] if results else {}
    return ReleasedWeights(
        name=model['Name'], family=model.get('In Collection', ''),
        backbone=meta.get('Backbone', ''),
        task=CLASSIFICATION if pretraining else first.get('Task', ''),
        dataset=meta.get('Training Data', first.get('Dataset', '')),
        config=model.get('Config'), weights=model.get('Weights'), file=meta.get('File'),
        download=meta.get('Download'), resolution=meta.get('Resolution'), metrics=metrics,
        source=meta.get('Source'), recipe=meta.get('Official Recipe'), note=meta.get('Note'),
        official_config=meta.get('Official Config'),
        official_values=meta.get('Official Values') or {}, deviations=meta.get('Deviations') or {},
        official_note=meta.get('Official Note'))


def released_weights(family: Optional[str] = None, *, pretraining: Optional[bool] = None,
                     index: Union[str, Path, None] = None) -> list[ReleasedWeights]:
    """The records of the model index, in its order.

    Args:
        family: a collection (``'PVTv2'``, ``'FocalNet'``, ...; the registered
            backbone type, any case); ``None``: all.
        pretraining: ``True``: only the official ImageNet checkpoints;
            ``False``: only the dense configs' records; ``None``: both.
        index: a ``model-index.yml`` to read instead of the package's.
    """
    collections, models = load_model_index(index)
    records = [_record(m) for m in models]
    if family is not None:
        names = {c['Name'].lower(): c['Name'] for c in collections}
        if family.lower() not in names:
            raise ValueError(f'unknown family {family!r}; the model index has '
                             f'{sorted(names.values())}')
        records = [r for r in records if r.family == names[family.lower()]]
    if pretraining is not None:
        records = [r for r in records if r.pretraining == pretraining]
    return records


#: evaluator keys (mmdet 3 / mmseg 1 / mmpretrain 1) -> (the papers' metric name, factor)
PAPER_METRICS = {'coco/bbox_mAP': ('box AP', 100.), 'coco/segm_mAP': ('mask AP', 100.),
                 'mIoU': ('mIoU', 1.), 'accuracy/top1': ('Top 1 Accuracy', 1.)}


def record_of_config(config: Union[str, Path],
                     index: Union[str, Path, None] = None) -> Optional[ReleasedWeights]:
    """The model-index record of one of our dense configs (``configs/x.py``,
    any path ending so), or ``None``."""
    parts = Path(config).parts
    for r in released_weights(pretraining=False, index=index):
        if r.config and parts[-2:] == Path(r.config).parts[-2:]:
            return r
    return None


def in_paper_terms(metrics: dict, record: Optional[ReleasedWeights] = None) -> str:
    """An evaluation's metrics under the names (and scale) the papers and the
    model index use, beside the published number where ``record`` has one:
    ``'box AP 45.1 (published 45.3), mask AP 41.0 (published 41.2)'``;
    empty if none of :data:`PAPER_METRICS` is among ``metrics``."""
    cells = []
    for key, (name, factor) in PAPER_METRICS.items():
        if key in metrics:
            cell = f'{name} {float(metrics[key]) * factor:.1f}'
            if record is not None and name in record.metrics:
                cell += f' (published {record.metrics[name]})'
            cells.append(cell)
    return ', '.join(cells)

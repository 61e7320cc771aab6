"""Clear errors for datasets that end up empty and images that cannot be read.

An annotation file without images, a folder without images, or a filter
(``filter_empty_gt``, ``min_size``) that removes every sample makes mmengine's
``BaseDataset`` fail with ``need at least one array to concatenate`` (or, with
``serialize_data=False``, an ``InfiniteSampler`` that loops forever).
:func:`build_dataset` raises :class:`EmptyDatasetError` instead, naming the
dataset, its files and its filter.

mmcv's ``LoadImageFromFile`` lets some decoding failures through as bare
OpenCV / PIL errors (an empty file gives ``!buf.empty() in function
'imdecode_'``); :func:`load_naming_file` re-raises them as
:class:`ImageLoadError` naming the file.

Nothing here changes mmengine or mmcv: :class:`~vattn_mm.engine.SafeRunner`
builds its datasets with these checks and wraps its image loaders in
:class:`~vattn_mm.engine.NameImageErrors`.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional


class EmptyDatasetError(ValueError):
    """A dataset holds no sample after loading and filtering."""


class ImageLoadError(ValueError):
    """An image file exists but cannot be decoded."""


def describe_empty(dataset: Any) -> str:
    """Why ``dataset`` is empty, with the settings that made it so."""
    name = type(dataset).__name__
    filt = getattr(dataset, 'filter_cfg', None)
    return (f'{name} has no samples: ann_file={getattr(dataset, "ann_file", None)!r}, '
            f'data_root={getattr(dataset, "data_root", None)!r}, '
            f'data_prefix={getattr(dataset, "data_prefix", None)}'
            + (f', filter_cfg={filt}' if filt else '')
            + '. Check the paths; an annotation file needs images (and, with '
            'filter_empty_gt=True, annotated objects) for the training set.')


def check_not_empty(dataset: Any) -> None:
    """Raise :class:`EmptyDatasetError` if ``dataset`` has no sample
    (datasets without a length, e.g. iterable ones, pass)."""
    if hasattr(dataset, '__len__') and len(dataset) == 0:
        raise EmptyDatasetError(describe_empty(dataset))


def empty_dataset_error(cfg: Mapping) -> Optional[EmptyDatasetError]:
    """After building the dataset of ``cfg`` failed: the
    :class:`EmptyDatasetError` to raise if the dataset is empty, else ``None``.

    mmengine serializes a dataset's samples with ``np.concatenate``, which
    fails on none; the dataset is built once more without serialization to
    tell an empty dataset from other errors.
    """
    try:
        from mmengine.registry import DATASETS
        probe = DATASETS.build(dict(cfg, serialize_data=False))
        if hasattr(probe, 'full_init'):
            probe.full_init()
    except Exception:  # the config fails in another way, the caller's error is the one to show
        return None
    return EmptyDatasetError(describe_empty(probe)) if len(probe) == 0 else None


def build_dataset(cfg: Mapping) -> Any:
    """``DATASETS.build(cfg)``, fully initialised, raising
    :class:`EmptyDatasetError` if it holds no sample."""
    try:
        from mmengine.registry import DATASETS
        dataset = DATASETS.build(cfg)
        if hasattr(dataset, 'full_init'):
            dataset.full_init()
    except ValueError as err:
        empty = empty_dataset_error(cfg)
        if empty is not None:
            raise empty from err
        raise
    check_not_empty(dataset)
    return dataset


def load_naming_file(load: Callable[[dict], Optional[dict]], results: dict) -> Optional[dict]:
    """``load(results)``, with decoding errors re-raised as
    :class:`ImageLoadError` naming ``results['img_path']``."""
    try:
        return load(results)
    except FileNotFoundError:
        raise
    except Exception as err:  # decoders raise assorted types
        raise ImageLoadError(f'failed to load image {results.get("img_path")!r} (empty, '
                             f'truncated or not an image?): {type(err).__name__}: '
                             f'{str(err).strip()}') from err


def leaf_datasets(dataset: Any) -> Iterator[Any]:
    """The datasets inside mmengine / mmdet dataset wrappers (``dataset``
    itself if it wraps none)."""
    inner = getattr(dataset, 'datasets', None) or (
        [dataset.dataset] if hasattr(dataset, 'dataset') else None)
    if not inner:
        yield dataset
        return
    for child in inner:
        yield from leaf_datasets(child)

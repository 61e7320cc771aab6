"""Clear errors for datasets that end up empty and images that cannot be read.

An annotation file without images, a folder without images, or a filter
(``filter_empty_gt``, ``min_size``) that removes every sample makes mmengine's
``BaseDataset`` fail with ``need at least one array to concatenate`` (or, with
``serialize_data=False``, an ``InfiniteSampler`` that loops forever).  The
check below raises an error naming the dataset, its files and its filter.

mmcv's ``LoadImageFromFile`` lets some decoding failures through as bare
OpenCV / PIL errors (an empty file gives ``!buf.empty() in function
'imdecode_'``); they are re-raised naming the file.
"""
from __future__ import annotations

from typing import Optional

from mmcv.transforms import LoadImageFromFile
from mmengine.dataset import BaseDataset


class EmptyDatasetError(ValueError):
    """A dataset holds no sample after loading and filtering."""


class ImageLoadError(ValueError):
    """An image file exists but cannot be decoded."""


def describe_empty(dataset: BaseDataset) -> str:
    """Why ``dataset`` is empty, with the settings that made it so."""
    name = type(dataset).__name__
    filt = getattr(dataset, 'filter_cfg', None)
    return (f'{name} has no samples: ann_file={dataset.ann_file!r}, '
            f'data_root={dataset.data_root!r}, data_prefix={dataset.data_prefix}'
            + (f', filter_cfg={filt}' if filt else '')
            + '. Check the paths; an annotation file needs images (and, with '
            'filter_empty_gt=True, annotated objects) for the training set.')


_serialize = BaseDataset._serialize_data
_init = BaseDataset.full_init


def _serialize_nonempty(self: BaseDataset):
    if not self.data_list:
        raise EmptyDatasetError(describe_empty(self))
    return _serialize(self)


def _full_init_nonempty(self: BaseDataset) -> None:
    _init(self)
    if not self.serialize_data and not self.data_list:
        raise EmptyDatasetError(describe_empty(self))


_load_image = LoadImageFromFile.transform


def _load_image_naming_file(self: LoadImageFromFile, results: dict) -> Optional[dict]:
    try:
        return _load_image(self, results)
    except FileNotFoundError:
        raise
    except Exception as err:  # decoders raise assorted types
        raise ImageLoadError(f'failed to load image {results.get("img_path")!r} (empty, '
                             f'truncated or not an image?): {type(err).__name__}: '
                             f'{str(err).strip()}') from err


def use_clear_data_errors() -> None:
    """Make every mmengine dataset raise :class:`EmptyDatasetError` when
    it ends up empty, and image loading errors name the file."""
    BaseDataset._serialize_data = _serialize_nonempty
    BaseDataset.full_init = _full_init_nonempty
    LoadImageFromFile.transform = _load_image_naming_file

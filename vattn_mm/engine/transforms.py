"""Data-pipeline wrappers a config names (or :class:`~vattn_mm.engine.SafeRunner` applies)."""
from __future__ import annotations

import logging
import math
from typing import Callable, Optional, Union

import mmcv
from mmcv.transforms import BaseTransform, LoadImageFromFile, Resize
from mmengine.logging import print_log
from mmengine.registry import TRANSFORMS

from ..utils.data_checks import ImageLoadError, leaf_datasets, load_naming_file


@TRANSFORMS.register_module()
class NameImageErrors(BaseTransform):
    """Run an image-loading transform; an image that exists but cannot be
    decoded raises :class:`~vattn_mm.utils.ImageLoadError` naming the file
    instead of a bare OpenCV / PIL error.

    With ``skip_unreadable=True`` such a sample is skipped instead (the
    dataset then draws another one, as mmengine's datasets do for a pipeline
    that returns None), each skip logged with the count so far; more than
    ``max_skipped_share`` of the images loaded (counted from the first
    ``1 / max_skipped_share`` loads on, one skip allowed before) raises
    :class:`~vattn_mm.utils.ImageLoadError`. Counts are per process (each
    data worker counts its own loads).

    Args:
        transform: the loading transform or its config, e.g.
            ``dict(type='LoadImageFromFile')``.
        skip_unreadable: skip undecodable images instead of stopping.
        max_skipped_share: the share of skipped images that stops the run.
    """

    def __init__(self, transform: Union[dict, Callable], skip_unreadable: bool = False,
                 max_skipped_share: float = 0.001):
        if not 0 < max_skipped_share < 1:
            raise ValueError(f'NameImageErrors: max_skipped_share must be in (0, 1), '
                             f'got {max_skipped_share!r}')
        self.loader = TRANSFORMS.build(transform) if isinstance(transform, dict) else transform
        self.skip_unreadable, self.max_skipped_share = skip_unreadable, max_skipped_share
        self.loads = self.skipped = 0

    def transform(self, results: dict) -> Optional[dict]:
        self.loads += 1
        try:
            return load_naming_file(self.loader, results)
        except ImageLoadError as err:
            if not self.skip_unreadable:
                raise
            self.skipped += 1
            allowed = self.max_skipped_share * max(self.loads, 1 / self.max_skipped_share)
            if self.skipped > allowed:
                raise ImageLoadError(
                    f'{self.skipped} of {self.loads} images loaded were unreadable, more than '
                    f'max_skipped_share={self.max_skipped_share}; the last: {err}') from err
            print_log(f'Skipped an unreadable image ({self.skipped} of {self.loads} loaded in '
                      f'this process): {err}', logger='current', level=logging.WARNING)
            return None

    def __repr__(self) -> str:
        skip = f', skip_unreadable=True, max_skipped_share={self.max_skipped_share}' \
            if self.skip_unreadable else ''
        return f'{type(self).__name__}({self.loader!r}{skip})'


@TRANSFORMS.register_module()
class AlignResize(Resize):
    """:class:`mmcv.transforms.Resize`, then each side of the image (and of
    ``gt_seg_map``, nearest) stretched up to a multiple of ``size_divisor``:
    the test-time resize of the PVT-family segmentation code (P2T's and
    QuadTree's ``AlignResize``), whose published mIoU was measured on such
    inputs.  ``img_shape`` and ``scale_factor`` describe the aligned image,
    so that predictions are resized back to the original image.  For
    segmentation pipelines: boxes and keypoints are not aligned (an error).

    Args:
        size_divisor: each aligned side is the smallest multiple of it at
            least the resized side.
        *args, **kwargs: those of :class:`mmcv.transforms.Resize`.
    """

    def __init__(self, *args, size_divisor: int = 32, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(size_divisor, int) or size_divisor < 1:
            raise ValueError('AlignResize: size_divisor must be a positive int, '
                             f'got {size_divisor!r}')
        self.size_divisor = size_divisor

    def transform(self, results: dict) -> dict:
        for key in ('gt_bboxes', 'gt_keypoints'):
            if results.get(key) is not None:
                raise ValueError(f'AlignResize stretches the image only; results hold {key!r}: '
                                 'use Resize for detection pipelines')
        height, width = results['img'].shape[:2]
        results = super().transform(results)
        h, w = results['img_shape']
        size = (math.ceil(w / self.size_divisor) * self.size_divisor,
                math.ceil(h / self.size_divisor) * self.size_divisor)
        if size != (w, h):
            results['img'] = mmcv.imresize(results['img'], size, interpolation=self.interpolation,
                                           backend=self.backend)
            if results.get('gt_seg_map') is not None:
                results['gt_seg_map'] = mmcv.imresize(results['gt_seg_map'], size,
                                                      interpolation='nearest', backend=self.backend)
            results['img_shape'] = size[::-1]
            results['scale_factor'] = (size[0] / width, size[1] / height)
        return results

    def __repr__(self) -> str:
        return f'{super().__repr__()[:-1]}, size_divisor={self.size_divisor})'


def name_image_errors(dataset) -> int:
    """Wrap every ``LoadImageFromFile`` (or subclass) in the pipelines of
    ``dataset`` and of the datasets it wraps in :class:`NameImageErrors`;
    returns how many were wrapped."""
    wrapped = 0
    for leaf in leaf_datasets(dataset):
        steps = getattr(getattr(leaf, 'pipeline', None), 'transforms', None)
        for i, step in enumerate(steps or []):
            if isinstance(step, LoadImageFromFile):
                steps[i] = NameImageErrors(step)
                wrapped += 1
    return wrapped

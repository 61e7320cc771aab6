"""Data-pipeline wrappers a config names (or :class:`~vattn_mm.engine.SafeRunner` applies)."""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

import mmcv
from mmcv.transforms import BaseTransform, LoadImageFromFile, Resize
from mmengine.registry import TRANSFORMS

from ..utils.data_checks import leaf_datasets, load_naming_file


@TRANSFORMS.register_module()
class NameImageErrors(BaseTransform):
    """Run an image-loading transform; an image that exists but cannot be
    decoded raises :class:`~vattn_mm.utils.ImageLoadError` naming the file
    instead of a bare OpenCV / PIL error.

    Args:
        transform: the loading transform or its config, e.g.
            ``dict(type='LoadImageFromFile')``.
    """

    def __init__(self, transform: Union[dict, Callable]):
        self.loader = TRANSFORMS.build(transform) if isinstance(transform, dict) else transform

    def transform(self, results: dict) -> Optional[dict]:
        return load_naming_file(self.loader, results)

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.loader!r})'


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

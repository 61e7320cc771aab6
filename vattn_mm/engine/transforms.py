"""Data-pipeline wrappers a config names (or :class:`~vattn_mm.engine.SafeRunner` applies)."""
from __future__ import annotations

from typing import Callable, Optional, Union

from mmcv.transforms import BaseTransform, LoadImageFromFile
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

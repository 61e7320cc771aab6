"""Utilities: safe checkpoint loading (also by URL), crash-safe file writing, dataset
checks, mixed precision for mmcv ops, and what
``tools/train.py`` / ``tools/test.py`` do to a run's config (:mod:`.config_loading`,
:mod:`.protections`, :mod:`.visualization`) and at the end of a distributed run
(:mod:`.distributed_exit`).  Nothing here registers anything or changes
mmengine, mmcv or torch on import."""
from .amp import float32_mmcv_ops, float32_unless_native
from .atomic_io import DiskFullError, atomic_write
from .checksum import CorruptCheckpointError
from .data_checks import EmptyDatasetError, ImageLoadError, build_dataset
from .download import CheckpointDownloadError, cached_download, is_url
from .safe_load import (TRUST_ENV, UnreadableCheckpointError, UntrustedCheckpointError,
                        load_checkpoint_file, load_runner_checkpoint, openmmlab_globals_allowed,
                        openmmlab_safe_globals, trust_checkpoint)

__all__ = [
    'CheckpointDownloadError', 'CorruptCheckpointError', 'DiskFullError', 'EmptyDatasetError',
    'ImageLoadError',
    'TRUST_ENV', 'UnreadableCheckpointError', 'UntrustedCheckpointError', 'atomic_write',
    'build_dataset', 'cached_download', 'is_url',
    'float32_mmcv_ops', 'float32_unless_native', 'load_checkpoint_file', 'load_runner_checkpoint',
    'openmmlab_globals_allowed', 'openmmlab_safe_globals', 'trust_checkpoint',
]

"""Utilities: safe checkpoint loading, crash-safe checkpoint writing, dataset
checks, mixed precision for mmcv ops and launcher helpers."""
from .amp import float32_unless_native, use_float32_detection_ops
from .atomic_io import (AtomicLocalBackend, CrashSafeCheckpointHook, atomic_write,
                        use_crash_safe_checkpoints)
from .data_checks import EmptyDatasetError, ImageLoadError, use_clear_data_errors
from .exact_load import ExactCheckpointHook
from .safe_load import (TRUST_ENV, UnreadableCheckpointError, UntrustedCheckpointError,
                        allow_openmmlab_checkpoints, load_checkpoint_file,
                        openmmlab_safe_globals, trust_checkpoint, use_trusted_checkpoint_loader)


def harden_mmengine() -> None:
    """What importing ``vattn_mm`` sets up: the safe-loading allow-list,
    per-file trust for anything else, atomic checkpoint writes, clear
    errors for empty datasets and unreadable images, and float32 mmcv
    detection ops under bfloat16 autocast."""
    allow_openmmlab_checkpoints()
    use_trusted_checkpoint_loader()
    use_crash_safe_checkpoints()
    use_clear_data_errors()
    use_float32_detection_ops()


__all__ = [
    'AtomicLocalBackend', 'CrashSafeCheckpointHook', 'EmptyDatasetError', 'ExactCheckpointHook',
    'ImageLoadError', 'TRUST_ENV', 'UnreadableCheckpointError', 'UntrustedCheckpointError',
    'allow_openmmlab_checkpoints', 'atomic_write', 'float32_unless_native', 'harden_mmengine',
    'load_checkpoint_file', 'openmmlab_safe_globals', 'trust_checkpoint', 'use_clear_data_errors',
    'use_crash_safe_checkpoints', 'use_float32_detection_ops', 'use_trusted_checkpoint_loader',
]

"""What configs name to switch vattn-mm's protections on: the runner
``SafeRunner``, the hooks ``CrashSafeCheckpointHook``, ``PlainMessageHubHook``
and ``ExactCheckpointHook``, the transform ``NameImageErrors`` and the file
backend ``'atomic_local'`` (see docs/reliability.md).  Importing registers
these new names and changes nothing else."""
from .hooks import ATOMIC_BACKEND, CrashSafeCheckpointHook, ExactCheckpointHook, PlainMessageHubHook
from .runner import SafeRunner
from .transforms import NameImageErrors, name_image_errors

__all__ = ['ATOMIC_BACKEND', 'CrashSafeCheckpointHook', 'ExactCheckpointHook', 'NameImageErrors',
           'PlainMessageHubHook', 'SafeRunner', 'name_image_errors']

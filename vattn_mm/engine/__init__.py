"""What configs name to switch vattn-mm's protections on: the runner
``SafeRunner`` (``SafeFlexibleRunner`` for mmengine's strategies, with the FSDP
auto-wrap policy ``token_block_wrap_policy``), the hooks ``CrashSafeCheckpointHook``,
``PlainMessageHubHook``, ``RandomStateHook``, ``FiniteLossHook``, ``PreemptionHook`` and
``ExactCheckpointHook``, the loop ``ResumableEpochBasedTrainLoop``, the
transform ``NameImageErrors`` and the file backend ``'atomic_local'`` (see
docs/reliability.md), ``CompileModulesHook`` (``torch.compile`` of the backbone,
docs/training.md) and the optimizer-wrapper constructor
``NormDecayOptimWrapperConstructor`` (Mask2Former's no decay on any norm).
Importing registers these new names and changes nothing else."""
from .compile import CompileModulesHook
from .finite import (FiniteLossHook, NonFiniteLossError, NonFiniteWeightsError,
                     check_finite_weights)
from .fsdp import token_block_wrap_policy
from .hooks import (ATOMIC_BACKEND, CrashSafeCheckpointHook, ExactCheckpointHook,
                    PlainMessageHubHook, check_checkpoint_fits)
from .loops import ResumableEpochBasedTrainLoop
from .optim import NormDecayOptimWrapperConstructor
from .preemption import PREEMPTED_EXIT_CODE, PreemptionHook
from .random_state import RandomStateHook, capture_random_state, restore_random_state
from .runner import SafeFlexibleRunner, SafeRunner
from .transforms import AlignResize, NameImageErrors, name_image_errors

__all__ = ['ATOMIC_BACKEND', 'CompileModulesHook',
           'CrashSafeCheckpointHook', 'ExactCheckpointHook', 'FiniteLossHook',
           'AlignResize', 'NameImageErrors', 'NonFiniteLossError', 'NonFiniteWeightsError',
           'NormDecayOptimWrapperConstructor', 'PREEMPTED_EXIT_CODE', 'PlainMessageHubHook',
           'PreemptionHook', 'RandomStateHook', 'ResumableEpochBasedTrainLoop',
           'SafeFlexibleRunner', 'SafeRunner', 'capture_random_state', 'check_checkpoint_fits',
           'check_finite_weights',
           'name_image_errors', 'restore_random_state', 'token_block_wrap_policy']

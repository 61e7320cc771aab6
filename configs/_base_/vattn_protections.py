# vattn-mm's runtime protections (docs/reliability.md) without the import of vattn_mm:
# vattn_runtime.py is this file plus that import. A recipe whose upstream base sets its own
# `custom_imports` (mmseg's Mask2Former) inherits this file and adds 'vattn_mm' to them.
# Checkpoints read weights-only (OpenMMLab allow-list; other files only when trusted one by
# one), written atomically and rotated only after the new one is on disk; empty datasets
# and undecodable images raise errors naming them.
runner_type = 'SafeRunner'
# mmcv's nms / roi_align run in float32 under bfloat16 autocast while the runner runs.
float32_mmcv_ops = True
# Exact resume: every rank's Python / NumPy / torch / CUDA generator states go into the
# checkpoints and come back on resume. A NaN / inf loss stops the run, naming the iteration
# and the loss terms; no checkpoint with non-finite weights is written. (SafeRunner adds
# both hooks if a config replaces this list, and PreemptionHook: a SIGTERM stops the run
# after its iteration with a checkpoint of it.)
custom_hooks = [dict(type='RandomStateHook'), dict(type='FiniteLossHook')]

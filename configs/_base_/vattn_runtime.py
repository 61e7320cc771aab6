# vattn-mm's runtime protections (docs/reliability.md), inherited by the recipes in this
# folder and the demos. Any train.py / test.py that builds `runner_type` when the config
# has one (tools/, mmdet's, mmseg's, mmpretrain's) switches them on.
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)
# Checkpoints read weights-only (OpenMMLab allow-list; other files only when trusted one by
# one), written atomically and rotated only after the new one is on disk; empty datasets
# and undecodable images raise errors naming them.
runner_type = 'SafeRunner'
# mmcv's nms / roi_align run in float32 under bfloat16 autocast while the runner runs.
float32_mmcv_ops = True
# Exact resume: every rank's Python / NumPy / torch / CUDA generator states go into the
# checkpoints and come back on resume. A NaN / inf loss stops the run, naming the iteration
# and the loss terms; no checkpoint with non-finite weights is written. (SafeRunner adds
# both hooks if a config replaces this list.)
custom_hooks = [dict(type='RandomStateHook'), dict(type='FiniteLossHook')]

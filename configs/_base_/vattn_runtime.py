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

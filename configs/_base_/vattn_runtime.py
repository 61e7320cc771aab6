# vattn-mm's runtime protections (docs/reliability.md), inherited by the recipes in this
# folder and the demos. Any train.py / test.py that builds `runner_type` when the config
# has one (tools/, mmdet's, mmseg's, mmpretrain's) switches them on.
_base_ = './vattn_protections.py'
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

# RetinaNet + P2T-Small, COCO 1x (P2T paper / official detection/configs/retinanet_p2t_s_fpn_1x_coco.py:
# AdamW lr 1e-4 wd 1e-4, 12 epochs, steps at 8 and 11, 500-iteration linear warm-up,
# 1333x800, 8 GPUs x 2 images; the official dense backbone uses drop_path_rate 0.1).
# The official config as released does not build (its AdamW lacks `_delete_` and merges into the
# base SGD optimizer); this one follows its evident recipe, that of the tiny config.
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/p2t_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

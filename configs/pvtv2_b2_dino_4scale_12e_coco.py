# DINO 4-scale + PVTv2-b2, COCO 12 epochs, mmdet's DINO recipe (dino_4scale_coco_12e.py);
# PVTv2 published no DINO run. Drop path 0.1.
_base_ = ['./_base_/dino_4scale_coco_12e.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, out_indices=(1, 2, 3)),
             neck=dict(in_channels=_base_.backbone_channels[1:]))

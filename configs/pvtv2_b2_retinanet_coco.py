# RetinaNet + PVTv2-b2, COCO 1x (PVTv2 paper: AdamW lr 1e-4 wd 1e-4, 1333x800, 16 images/batch).
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# RetinaNet + PVTv2-b5, COCO 1x: the recipe of pvtv2_b2_retinanet_coco.py.
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/pvtv2_b5.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# RetinaNet + PVTv2-b5, COCO 1x: the recipe of pvtv2_b2_retinanet_coco.py with the official b5
# config's 1 image per GPU (8 in all) and lr 1e-4 / 1.4 (_base_/pvt_retinanet_coco_1x_8x1.py).
_base_ = ['./_base_/pvt_retinanet_coco_1x_8x1.py', './_base_/backbones/pvtv2_b5.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

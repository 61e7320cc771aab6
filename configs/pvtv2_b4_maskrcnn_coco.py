# Mask R-CNN + PVTv2-b4, COCO 1x: the recipe of pvtv2_b2_maskrcnn_coco.py with the official b4
# config's 1 image per GPU (8 in all) and lr 2e-4 / 1.4 (_base_/pvt_maskrcnn_coco_1x_8x1.py).
_base_ = ['./_base_/pvt_maskrcnn_coco_1x_8x1.py', './_base_/backbones/pvtv2_b4.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# Mask R-CNN + PVTv2-b1, COCO 1x: the recipe of pvtv2_b2_maskrcnn_coco.py.
_base_ = ['./_base_/pvt_maskrcnn_coco_1x.py', './_base_/backbones/pvtv2_b1.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# Mask R-CNN + FocalNet-S (LRF), COCO 1x: the recipe of focalnet_t_srf_maskrcnn_coco.py.
_base_ = ['./_base_/focalnet_maskrcnn_coco_1x.py', './_base_/backbones/focalnet_s_lrf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

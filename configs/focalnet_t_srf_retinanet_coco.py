# RetinaNet + FocalNet-T (SRF), COCO "1x" = 12 epochs of multi-scale training,
# FocalNet's Mask R-CNN recipe and detection drop path 0.1 (S 0.2, B 0.3).
_base_ = ['./_base_/focalnet_retinanet_coco_1x.py', './_base_/backbones/focalnet_t_srf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

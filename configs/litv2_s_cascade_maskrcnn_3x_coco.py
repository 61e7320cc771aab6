# Cascade Mask R-CNN + LITv2-S, COCO 3x with multi-scale training. LITv2 released no Cascade
# config; this is PVTv2's / FocalNet's recipe (cascade_mask_rcnn_3x_ms_coco.py) with LITv2's
# detection drop path 0.2.
_base_ = ['./_base_/cascade_mask_rcnn_3x_ms_coco.py', './_base_/backbones/litv2_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

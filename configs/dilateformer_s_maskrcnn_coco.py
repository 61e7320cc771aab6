# Mask R-CNN + DilateFormer-S, COCO 1x single-scale, with the recipe of
# _base_/dilateformer_maskrcnn_coco_1x.py (the paper released no dense recipe).
_base_ = ['./_base_/dilateformer_maskrcnn_coco_1x.py', './_base_/backbones/dilateformer_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

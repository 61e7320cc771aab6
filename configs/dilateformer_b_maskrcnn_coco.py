# Mask R-CNN + DilateFormer-B, COCO 1x: the recipe of dilateformer_s_maskrcnn_coco.py.
_base_ = ['./_base_/dilateformer_maskrcnn_coco_1x.py', './_base_/backbones/dilateformer_b.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

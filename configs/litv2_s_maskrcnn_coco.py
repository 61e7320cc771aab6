# Mask R-CNN + LITv2-S, COCO 1x single-scale, the recipe of the official
# detection/configs/litv2/mask_rcnn_litv2_s_fpn_1x_coco.py, drop_path_rate 0.2.
_base_ = ['./_base_/litv2_maskrcnn_coco_1x.py', './_base_/backbones/litv2_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

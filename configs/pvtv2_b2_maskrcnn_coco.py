# Mask R-CNN + PVTv2-b2, COCO 1x, the recipe of the official (whai362/PVT) detection/configs/
# mask_rcnn_pvt_v2_b2_fpn_1x_coco.py: AdamW lr 2e-4 wd 1e-4, 1333x800, 8 GPUs x 2 images.
_base_ = ['./_base_/pvt_maskrcnn_coco_1x.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

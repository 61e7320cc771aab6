# Cascade Mask R-CNN + FocalNet-T (LRF), COCO 3x with multi-scale training, FocalNet's recipe
# (microsoft/FocalNet detection/configs/focalnet/
# cascade_mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_3x_coco_lrf.py): focal
# windows 11, 9, 9, 7 by stage (the ImageNet 3x3 kernels are zero-padded on loading), drop
# path 0.3.
_base_ = ['./_base_/cascade_mask_rcnn_3x_ms_coco.py', './_base_/backbones/focalnet_t_lrf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3,
                           arch=dict(embed_dim=96, depths=[2, 2, 6, 2], focal_levels=3,
                                     focal_windows=[11, 9, 9, 7])),
             neck=dict(in_channels=_base_.backbone_channels))

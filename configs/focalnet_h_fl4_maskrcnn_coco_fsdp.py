# Mask R-CNN + FocalNet-H (FL4), COCO 1x, sharded over the GPUs (FSDP, configs/_base_/fsdp.py)
# with activation checkpointing in the backbone: the recipe of focalnet_t_srf_maskrcnn_coco.py.
#     tools/dist_train.sh configs/focalnet_h_fl4_maskrcnn_coco_fsdp.py 8
_base_ = ['./_base_/focalnet_maskrcnn_coco_1x.py', './_base_/backbones/focalnet_h_fl4.py',
          './_base_/fsdp.py']
runner_type = 'SafeFlexibleRunner'
model = dict(backbone=dict(_base_.backbone, _delete_=True, with_cp=True),
             neck=dict(in_channels=_base_.backbone_channels))

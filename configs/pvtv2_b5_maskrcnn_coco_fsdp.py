# pvtv2_b5_maskrcnn_coco.py sharded over the GPUs (FSDP, configs/_base_/fsdp.py), with
# activation checkpointing in the backbone.
#     tools/dist_train.sh configs/pvtv2_b5_maskrcnn_coco_fsdp.py 8
_base_ = ['./pvtv2_b5_maskrcnn_coco.py', './_base_/fsdp.py']
runner_type = 'SafeFlexibleRunner'
model = dict(backbone=dict(with_cp=True))

# Cascade Mask R-CNN on COCO, 3x schedule with multi-scale training, the recipe of PVTv2's
# and FocalNet's releases (whai362/PVT detection/configs/
# cascade_mask_rcnn_pvt_v2_b2_fpn_3x_mstrain_fp16.py, microsoft/FocalNet
# cascade_mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_3x_coco_*.py, both Swin's):
# each of the three stages' box heads has 4 shared convs (SyncBN) + 1 fc and a GIoU loss
# (weight 10) on decoded boxes; the schedule, optimizer and resize of mstrain_adamw_3x.py,
# 16 images/batch (8 GPUs x 2). A backbone config adds its backbone and neck.in_channels.
_base_ = [
    'mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    './mstrain_adamw_3x.py',
    'mmdet::_base_/default_runtime.py',
    './vattn_runtime.py',
]

# the stages' box-regression target stds, tighter at each stage
stage_target_stds = [[0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                     [0.033, 0.033, 0.067, 0.067]]
model = dict(roi_head=dict(bbox_head=[
    dict(type='ConvFCBBoxHead', num_shared_convs=4, num_shared_fcs=1, in_channels=256,
         conv_out_channels=256, fc_out_channels=1024, roi_feat_size=7, num_classes=80,
         bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4, target_stds=stds),
         reg_class_agnostic=False, reg_decoded_bbox=True,
         norm_cfg=dict(type='SyncBN', requires_grad=True),
         loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
         loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
    for stds in stage_target_stds]))

train_pipeline = _base_.load_boxes_and_masks + _base_.mstrain_steps
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

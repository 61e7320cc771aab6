# ATSS on COCO, 3x schedule with multi-scale training, the recipe of PVTv2's release
# (whai362/PVT detection/configs/atss_pvt_v2_b2_fpn_3x_mstrain_fp16.py): mmdet's ATSS
# (FPN from stride 8 with two extra levels on its outputs, GIoU loss, centerness), the
# schedule, optimizer and resize of mstrain_adamw_3x.py, 16 images/batch (8 GPUs x 2).
# A backbone config adds its backbone and neck.in_channels; gfl_3x_ms_coco.py swaps the head.
_base_ = [
    'mmdet::_base_/datasets/coco_detection.py',
    './mstrain_adamw_3x.py',
    'mmdet::_base_/default_runtime.py',
    './vattn_runtime.py',
]

model = dict(
    type='ATSS',
    data_preprocessor=dict(type='DetDataPreprocessor', mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_size_divisor=32),
    backbone=dict(),  # a backbone config puts its fragment's backbone here
    neck=dict(type='FPN', out_channels=256, start_level=1, add_extra_convs='on_output',
              num_outs=5),
    bbox_head=dict(
        type='ATSSHead', num_classes=80, in_channels=256, stacked_convs=4, feat_channels=256,
        anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                              scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                        target_stds=[0.1, 0.1, 0.2, 0.2]),
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0),
        loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
        loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0)),
    train_cfg=dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1,
                   pos_weight=-1, debug=False),
    test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                  nms=dict(type='nms', iou_threshold=0.6), max_per_img=100))

train_pipeline = _base_.load_boxes + _base_.mstrain_steps
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))

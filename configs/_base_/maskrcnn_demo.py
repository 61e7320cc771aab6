# The Mask R-CNN demo recipe on the embedded demo shapes (tools/make_demo_data.py): trains
# from scratch on the CPU in a few minutes and reports COCO bbox/segm AP. A demo config adds
# a backbone fragment and the neck's in_channels (configs/demo/*_maskrcnn_demo.py).
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/default_runtime.py',
    './vattn_runtime.py',
]

data_root = 'data/demo/coco/'
metainfo = dict(
    classes=('circle', 'triangle', 'square', 'star'),
    palette=[(220, 20, 60), (0, 130, 200), (60, 180, 75), (255, 200, 0)])
image_size = (128, 128)  # the 256x256 demo images, halved: 4x cheaper steps

# A lighter Mask R-CNN (128-channel FPN and heads, 64 sampled RoIs per image,
# RoIAlign with 2x2 samples per bin) so that a CPU trains it in minutes, with
# GroupNorm in the FPN and the mask head (measured on this data after 400
# iterations: segm AP 0.710 with it, 0.656 without; bbox AP 0.651 / 0.656).
channels = 128
norm_cfg = dict(type='GN', num_groups=32, requires_grad=True)
model = dict(
    neck=dict(out_channels=channels, norm_cfg=norm_cfg),
    rpn_head=dict(
        in_channels=channels, feat_channels=channels,
        anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(roi_layer=dict(sampling_ratio=2), out_channels=channels),
        bbox_head=dict(in_channels=channels, fc_out_channels=256, num_classes=4),
        mask_roi_extractor=dict(roi_layer=dict(sampling_ratio=2), out_channels=channels),
        mask_head=dict(
            num_convs=2, in_channels=channels, conv_out_channels=channels,
            num_classes=4, norm_cfg=norm_cfg)),
    train_cfg=dict(
        rpn=dict(sampler=dict(num=128)),
        rpn_proposal=dict(nms_pre=1000, max_per_img=500),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(rpn=dict(nms_pre=300, max_per_img=300), rcnn=dict(max_per_img=20)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
train_dataloader = dict(
    batch_size=4,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='CocoDataset',
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=8),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=1,
    persistent_workers=True,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='CocoDataset',
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        test_mode=True,
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(
    type='CocoMetric', ann_file=data_root + 'annotations/instances_val.json',
    metric=['bbox', 'segm'], format_only=False)
test_evaluator = val_evaluator

max_iters = 400
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=1e-4),
    clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', by_epoch=False, begin=30, end=max_iters, eta_min=1e-5),
]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=100, max_keep_ckpts=2))
log_processor = dict(by_epoch=False)
env_cfg = dict(cudnn_benchmark=False)
randomness = dict(seed=0)

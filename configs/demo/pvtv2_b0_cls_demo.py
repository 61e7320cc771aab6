# ImageClassifier + PVTv2-b0 on the embedded demo shapes: object crops written by
# tools/make_demo_data.py to data/demo/cls/{train,val}/<class>/*.png (ImageNet folder layout).
# Trains from scratch on the CPU in a few minutes and reports top-1 accuracy.
_base_ = ['mmpretrain::_base_/default_runtime.py', '../_base_/vattn_runtime.py',
          '../_base_/backbones/pvtv2_b0.py']

data_root = 'data/demo/cls'
image_size = 64
num_classes = 4  # circle, square, star, triangle (folder names, sorted)

model = dict(
    type='ImageClassifier',
    data_preprocessor=dict(num_classes=num_classes, mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], to_rgb=True),
    backbone=dict(_base_.backbone, out_indices=(3, ), drop_path_rate=0.0, init_cfg=None),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=num_classes,
              in_channels=_base_.backbone_channels[-1],
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0), topk=(1, )))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=image_size, crop_ratio_range=(0.6, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=image_size, edge='short'),
    dict(type='CenterCrop', crop_size=image_size),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=32,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='train',
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=32,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CustomDataset', data_root=data_root, data_prefix='val',
                 pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

max_epochs = 12
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05),
                     clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=True, end=2, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=2),
]
default_hooks = dict(logger=dict(type='LoggerHook', interval=8),
                     checkpoint=dict(type='CheckpointHook', interval=6, max_keep_ckpts=1))
randomness = dict(seed=0)

# The UperNet demo recipe on the embedded demo shapes (tools/make_demo_data.py): trains from
# scratch on the CPU in a few minutes and reports mIoU. A demo config adds a backbone fragment
# and the heads' in_channels (configs/demo/pvtv2_b0_upernet_demo.py, projects/attention_zoo/configs/).
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    'mmseg::_base_/default_runtime.py',
    './vattn_runtime.py',
]

data_root = 'data/demo/ade/'
metainfo = dict(
    classes=('background', 'circle', 'triangle', 'square', 'star'),
    palette=[(0, 0, 0), (220, 20, 60), (0, 130, 200), (60, 180, 75), (255, 200, 0)])
crop_size = (256, 256)
norm_cfg = dict(type='BN', requires_grad=True)

model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    decode_head=dict(channels=128, num_classes=5, norm_cfg=norm_cfg),
    auxiliary_head=dict(channels=64, num_classes=5, norm_cfg=norm_cfg))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='PackSegInputs'),
]
dataset = dict(
    type='BaseSegDataset',
    data_root=data_root,
    metainfo=metainfo,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=False)
train_dataloader = dict(
    batch_size=4,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        dataset,
        data_prefix=dict(img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        dataset,
        data_prefix=dict(img_path='images/validation', seg_map_path='annotations/validation'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

max_iters = 200
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=1e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=20),
    dict(type='PolyLR', eta_min=1e-5, power=0.9, begin=20, end=max_iters, by_epoch=False),
]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=100, max_keep_ckpts=2))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)

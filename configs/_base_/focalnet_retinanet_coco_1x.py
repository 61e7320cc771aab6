# RetinaNet on COCO, "1x" = 12 epochs of MULTI-SCALE training. FocalNet released no
# RetinaNet config; this applies its Mask R-CNN 1x recipe (focalnet_maskrcnn_coco_1x.py),
# without masks. Official runs used mixed precision: add `--amp` to tools/train.py.
_base_ = ['./retinanet_coco_1x.py', './focalnet_coco_mstrain.py']

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='RandomFlip', prob=0.5),
    _base_.mstrain_resize,
    dict(type='PackDetInputs'),
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[9, 11], gamma=0.1),
]

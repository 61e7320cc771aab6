# Mask R-CNN on COCO, "1x" = 12 epochs of MULTI-SCALE training, the FocalNet recipe
# (microsoft/FocalNet detection/configs/focalnet/
# mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_1x_coco_srf.py): the resize of
# focalnet_coco_mstrain.py after a random flip; AdamW lr 1e-4 wd 0.05 (no decay on norms),
# lr x0.1 at epochs 9 and 11, 16 images/batch (8 GPUs x 2). Official runs used mixed
# precision: add `--amp` to tools/train.py.
_base_ = ['./maskrcnn_coco_1x.py', './focalnet_coco_mstrain.py']

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
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

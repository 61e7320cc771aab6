# Mask R-CNN + FocalNet-T (SRF), COCO "1x" = 12 epochs of MULTI-SCALE training, the
# FocalNet recipe (microsoft/FocalNet detection/configs/focalnet/
# mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_1x_coco_srf.py):
# shorter side 480-800 (or resize 400-600 + crop 384x600 + resize 480-800), long
# side <= 1333, random flip; AdamW lr 1e-4 wd 0.05 (no decay on norms), lr x0.1 at
# epochs 9 and 11, 16 images/batch (8 GPUs x 2), drop path 0.1 (S 0.2, B 0.3),
# focal windows 9 (the ImageNet 3x3 kernels are zero-padded on loading).
# Official runs used mixed precision: add `--amp` to tools/train.py.
_base_ = './_base_/maskrcnn_coco_1x.py'

pretrained = 'checkpoints/focalnet_tiny_srf.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='FocalNet',
        arch='tiny_srf',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

multi_scales = [(480, 1333), (512, 1333), (544, 1333), (576, 1333), (608, 1333),
                (640, 1333), (672, 1333), (704, 1333), (736, 1333), (768, 1333),
                (800, 1333)]
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='RandomChoice',
         transforms=[
             [dict(type='RandomChoiceResize', scales=multi_scales, keep_ratio=True)],
             [dict(type='RandomChoiceResize', scales=[(400, 1333), (500, 1333), (600, 1333)],
                   keep_ratio=True),
              dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
                   allow_negative_crop=True),
              dict(type='RandomChoiceResize', scales=multi_scales, keep_ratio=True)],
         ]),
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

# The multi-scale training resize of DETR / Sparse R-CNN that FocalNet and PVTv2 train their
# COCO detectors with (microsoft/FocalNet detection/configs/focalnet/
# mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_1x_coco_srf.py, whai362/PVT
# detection/configs/cascade_mask_rcnn_pvt_v2_b2_fpn_3x_mstrain_fp16.py): shorter side
# 480-800, or resize 400-600 + crop 384x600 + resize 480-800; long side <= 1333.
multi_scales = [(480, 1333), (512, 1333), (544, 1333), (576, 1333), (608, 1333),
                (640, 1333), (672, 1333), (704, 1333), (736, 1333), (768, 1333),
                (800, 1333)]
mstrain_resize = dict(
    type='RandomChoice',
    transforms=[
        [dict(type='RandomChoiceResize', scales=multi_scales, keep_ratio=True)],
        [dict(type='RandomChoiceResize', scales=[(400, 1333), (500, 1333), (600, 1333)],
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(384, 600),
              allow_negative_crop=True),
         dict(type='RandomChoiceResize', scales=multi_scales, keep_ratio=True)],
    ])
# what follows the loading in their training pipelines: a random flip, then the resize
mstrain_steps = [dict(type='RandomFlip', prob=0.5), mstrain_resize, dict(type='PackDetInputs')]
load_boxes = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True)]
load_boxes_and_masks = [dict(type='LoadImageFromFile'),
                        dict(type='LoadAnnotations', with_bbox=True, with_mask=True)]
# their optimizer: AdamW lr 1e-4 wd 0.05 for 16 images/batch, no weight decay on norms
# (it replaces the recipe's optimizer); the learning rate warms up linearly over the first
# 500 iterations
adamw_optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))
# the same in float16 mixed precision, as the official runs that used apex O1 trained
adamw_amp_optim_wrapper = dict(adamw_optim_wrapper, type='AmpOptimWrapper', dtype='float16',
                               loss_scale='dynamic')
warmup = dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500)

# FocalNet's COCO multi-scale training resize (microsoft/FocalNet detection/configs/focalnet/
# mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_1x_coco_srf.py): shorter side
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

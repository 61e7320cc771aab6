# Mask R-CNN + LITv2-S, COCO 1x single-scale (LITv2 paper / official
# detection/configs/litv2/mask_rcnn_litv2_s_fpn_1x_coco.py: AdamW lr 2e-4 wd 1e-4,
# no weight decay on norms, 12 epochs, steps at 8 and 11, 1333x800, 8 GPUs x 2
# images, drop_path_rate 0.2, trained in mixed precision (add --amp to
# tools/train.py for the same)).
_base_ = './_base_/maskrcnn_coco_1x.py'

pretrained = 'checkpoints/litv2_s.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='LITv2',
        arch='s',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))

# Mask R-CNN on COCO 1x single-scale as LITv2's release trains it (official
# detection/configs/litv2/mask_rcnn_litv2_s_fpn_1x_coco.py): AdamW lr 2e-4 wd 1e-4, no
# weight decay on norms, 12 epochs, steps at 8 and 11, 1333x800, 8 GPUs x 2 images, in
# mixed precision (add --amp to tools/train.py for the same).
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))

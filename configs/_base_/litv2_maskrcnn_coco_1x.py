# Mask R-CNN on COCO 1x single-scale as LITv2's release trains it (official
# detection/configs/litv2/mask_rcnn_litv2_s_fpn_1x_coco.py): AdamW lr 2e-4 wd 1e-4, no
# weight decay on norms, 12 epochs, steps at 8 and 11, 1333x800, 8 GPUs x 2 images, in
# float16 mixed precision (the official runs used apex O1).
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(
    type='AmpOptimWrapper', dtype='float16', loss_scale='dynamic',
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))

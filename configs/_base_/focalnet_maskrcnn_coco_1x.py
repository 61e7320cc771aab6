# Mask R-CNN on COCO, "1x" = 12 epochs of MULTI-SCALE training, the FocalNet recipe
# (microsoft/FocalNet detection/configs/focalnet/
# mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_1x_coco_srf.py): the resize of
# coco_mstrain.py after a random flip; AdamW lr 1e-4 wd 0.05 (no decay on norms),
# lr x0.1 at epochs 9 and 11, 16 images/batch (8 GPUs x 2), float16 mixed precision (the
# official runs used apex O1).
_base_ = ['./maskrcnn_coco_1x.py', './coco_mstrain.py']

train_pipeline = _base_.load_boxes_and_masks + _base_.mstrain_steps
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))

optim_wrapper = _base_.adamw_amp_optim_wrapper
param_scheduler = [
    _base_.warmup,
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[9, 11], gamma=0.1),
]

# The "3x" schedule of PVTv2's and FocalNet's multi-scale COCO detectors (whai362/PVT
# detection/configs/*_pvt_v2_b2_fpn_3x_mstrain_fp16.py, microsoft/FocalNet
# cascade_mask_rcnn_focalnet_tiny_patch4_mstrain_480-800_adamw_3x_coco_*.py, after Swin's):
# 36 epochs, AdamW lr 1e-4 wd 0.05 (no decay on norms), 500 warm-up iterations, lr x0.1 at
# epochs 27 and 33, 16 images/batch; the multi-scale resize of coco_mstrain.py; float16 mixed
# precision, as the official runs trained (apex O1). A recipe lists this file in place of
# mmdet's schedule_1x.
_base_ = ['mmdet::_base_/schedules/schedule_1x.py', './coco_mstrain.py']

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
optim_wrapper = _base_.adamw_amp_optim_wrapper
param_scheduler = [
    _base_.warmup,
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[27, 33],
         gamma=0.1),
]
auto_scale_lr = dict(enable=False, base_batch_size=16)

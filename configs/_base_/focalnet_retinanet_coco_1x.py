# RetinaNet on COCO, "1x" = 12 epochs of MULTI-SCALE training. FocalNet released no
# RetinaNet config; this applies its Mask R-CNN 1x recipe (focalnet_maskrcnn_coco_1x.py),
# without masks. Official runs used mixed precision: add `--amp` to tools/train.py.
_base_ = ['./retinanet_coco_1x.py', './coco_mstrain.py']

train_pipeline = _base_.load_boxes + _base_.mstrain_steps
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))

optim_wrapper = _base_.adamw_optim_wrapper
param_scheduler = [
    _base_.warmup,
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[9, 11], gamma=0.1),
]

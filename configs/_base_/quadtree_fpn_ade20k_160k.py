# Semantic FPN on ADE20K 512x512, 160k iterations, as QuadTree's release trains it (official
# segmentation/configs/sem_fpn/quadtree/fpn_pvt_v2_b2_quadtree_ade20k_160k.py, whose result
# the QuadTree README reports, 48.7 mIoU): AdamW lr 6e-5 betas (0.9, 0.999) wd 0.01, no decay
# on norms, 10x lr on the heads, 1500-iteration linear warm-up from 1e-6, poly decay power 1.0
# to 0 counted from iteration 0 (the warm-up scales it), 8 GPUs x 2 images; tested on images
# stretched to sides that are multiples of 32 (AlignResize).
_base_ = './fpn_ade20k_80k.py'

optim_wrapper = dict(
    optimizer=dict(lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.), head=dict(lr_mult=10.))))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=0, end=160000, by_epoch=False),
]
train_cfg = dict(max_iters=160000, val_interval=16000)
default_hooks = dict(checkpoint=dict(interval=16000))
train_dataloader = dict(batch_size=2)
test_pipeline = _base_.align_resize_test_pipeline
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

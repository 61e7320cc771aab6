# RetinaNet + DilateFormer-S, COCO 1x single-scale. The DilateFormer paper reports
# COCO results but released no dense code or recipe; this is the Swin 1x recipe
# (AdamW lr 1e-4 wd 0.05, no weight decay on norms, 12 epochs, steps at 8 and 11,
# 1333x800, 8 GPUs x 2 images). Dense-only choices (ours): LayerNorm (eps 1e-6) on
# each output, initialised 1/0 since no classification checkpoint has them, and
# BatchNorm of the stem/downsamplings kept in eval mode (ImageNet statistics,
# affine weights trained) because of the small per-GPU batch.
_base_ = './_base_/retinanet_coco_1x.py'

# official ImageNet release (DeiT-style {'model', 'model_ema', ...}; 'model' is loaded)
pretrained = 'checkpoints/dilateformer_small.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='DilateFormer',
        arch='small',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN', eps=1e-6),
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[72, 144, 288, 576]))

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))

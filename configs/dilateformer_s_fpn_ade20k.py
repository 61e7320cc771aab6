# Semantic FPN + DilateFormer-S, ADE20K 512x512, 80k iterations. The DilateFormer
# paper released no dense code or recipe; this is the PVT Semantic-FPN recipe
# (AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 4 GPUs x 4 images), no weight
# decay on norms. Dense-only choices (ours): LayerNorm (eps 1e-6) on each output,
# initialised 1/0, and BatchNorm of the stem/downsamplings in eval mode.
_base_ = './_base_/fpn_ade20k_80k.py'
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

optim_wrapper = dict(paramwise_cfg=dict(norm_decay_mult=0.))

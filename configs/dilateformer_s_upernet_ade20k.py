# UperNet + DilateFormer-S, ADE20K 512x512, 160k iterations. The DilateFormer paper
# reports ADE20K results but released no dense code or recipe; this is the
# Swin/UperNet recipe (AdamW lr 6e-5 wd 0.01, no weight decay on norms, linear
# warm-up 1500 iterations, poly decay power 1.0, 8 GPUs x 2 images). Dense-only
# choices (ours): LayerNorm (eps 1e-6) on each output, initialised 1/0, and
# BatchNorm of the stem/downsamplings in eval mode.
_base_ = './_base_/upernet_ade20k_160k.py'
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
    decode_head=dict(in_channels=[72, 144, 288, 576]),
    auxiliary_head=dict(in_channels=288))

optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.))

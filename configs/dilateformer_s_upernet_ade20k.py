# UperNet + DilateFormer-S, ADE20K 512x512, 160k iterations. The DilateFormer paper
# reports ADE20K results but released no dense code or recipe; this is the
# Swin/UperNet recipe (AdamW lr 6e-5 wd 0.01, no weight decay on norms, linear
# warm-up 1500 iterations, poly decay power 1.0, 8 GPUs x 2 images). Dense-only
# choices (ours): LayerNorm (eps 1e-6) on each output, initialised 1/0, and
# BatchNorm of the stem/downsamplings in eval mode.
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_160k.py',
    'mmseg::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

crop_size = (512, 512)
# official ImageNet release (DeiT-style {'model', 'model_ema', ...}; 'model' is loaded)
pretrained = 'checkpoints/dilateformer_small.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='DilateFormer',
        arch='small',
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        out_norm_cfg=dict(type='LN', eps=1e-6),
        norm_eval=True,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[72, 144, 288, 576], num_classes=150),
    auxiliary_head=dict(in_channels=288, num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(norm_decay_mult=0.))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

# Semantic FPN + DilateFormer-S, ADE20K 512x512, 80k iterations. The DilateFormer
# paper released no dense code or recipe; this is the PVT Semantic-FPN recipe
# (AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 4 GPUs x 4 images), no weight
# decay on norms. Dense-only choices (ours): LayerNorm (eps 1e-6) on each output,
# initialised 1/0, and BatchNorm of the stem/downsamplings in eval mode.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_80k.py',
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
    neck=dict(in_channels=[72, 144, 288, 576]),
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(norm_decay_mult=0.))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=4)

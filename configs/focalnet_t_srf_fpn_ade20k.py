# Semantic FPN + FocalNet-T (SRF), ADE20K 512x512, 80k iterations. FocalNet released
# no Semantic FPN setting; this is the PVT Semantic-FPN recipe used for every
# backbone here (AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 16 images/batch)
# with FocalNet's segmentation drop path 0.3 and focal windows 9 (the ImageNet
# 3x3 kernels are zero-padded on loading).
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

crop_size = (512, 512)
pretrained = 'checkpoints/focalnet_tiny_srf.pth'  # official ImageNet release, as downloaded
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='FocalNet',
        arch='tiny_srf',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]),
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=4)

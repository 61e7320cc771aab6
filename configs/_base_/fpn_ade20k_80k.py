# Semantic FPN on ADE20K 512x512, 80k iterations, the PVT recipe that the families'
# `*_fpn_ade20k.py` configs start from: AdamW lr 1e-4 wd 1e-4, poly decay (power 0.9),
# 16 images/batch (4 GPUs x 4). A family config adds its backbone and the neck's
# in_channels, and overrides what its paper changes.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
    './vattn_runtime.py',
]

crop_size = (512, 512)
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4))
param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=4)
auto_scale_lr = dict(enable=False, base_batch_size=16)
# The test pipeline of the PVT-family segmentation releases that test on images stretched to
# sides that are multiples of 32 (AlignResize; P2T, QuadTree): a recipe that reproduces one
# sets test_pipeline to it and its val / test dataloaders' pipelines.
align_resize_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='AlignResize', scale=(2048, 512), keep_ratio=True, size_divisor=32),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs'),
]

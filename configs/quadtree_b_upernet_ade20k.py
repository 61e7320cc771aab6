# UperNet + QuadTree-B-b2, ADE20K 512x512, 160k iterations.  QuadTree has no
# official UperNet config; this is the Swin/UperNet recipe (AdamW lr 6e-5 wd 0.01,
# no decay on norms, 1500-iteration linear warm-up, poly decay power 1.0,
# 8 GPUs x 2 images) with the official dense backbone settings (drop_path_rate 0.1,
# top-k [32] * 4, ReLU value branches).  Test images whose sides are not multiples
# of 32 are padded inside the backbone and its features cropped back.
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_160k.py',
    'mmseg::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

crop_size = (512, 512)
# official ImageNet release QuadTreeAttention_cls/b2.pth, saved under this name
pretrained = 'checkpoints/quadtree_b2.pth'
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='QuadTree',
        arch='b2',
        attn_type='B',
        topks=[32, 32, 32, 32],
        value_branch_act='ReLU',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512], num_classes=150),
    auxiliary_head=dict(in_channels=320, num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

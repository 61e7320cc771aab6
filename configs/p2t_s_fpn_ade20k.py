# Semantic FPN + P2T-Small, ADE20K 512x512, 80k iterations (official
# segmentation/configs/sem_fpn_p2t_s_ade20k_80k.py, whose results the P2T README reports:
# AdamW lr 1e-4 wd 1e-4, poly decay power 0.9 down to 1e-6, 8 GPUs x 2 images;
# the official dense backbone uses drop_path_rate 0.1).
_base_ = [
    'mmseg::_base_/models/fpn_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

crop_size = (512, 512)
pretrained = 'checkpoints/p2t_small.pth'  # official ImageNet release, as downloaded
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='P2T',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]),
    decode_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4))
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-6, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

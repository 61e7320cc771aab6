# Semantic FPN + P2T-Small, ADE20K 512x512, 80k iterations (official
# segmentation/configs/sem_fpn_p2t_s_ade20k_80k.py, whose results the P2T README reports:
# AdamW lr 1e-4 wd 1e-4, poly decay power 0.9 down to 1e-6, 8 GPUs x 2 images;
# the official dense backbone uses drop_path_rate 0.1).
_base_ = './_base_/fpn_ade20k_80k.py'
pretrained = 'checkpoints/p2t_small.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='P2T',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

param_scheduler = [
    dict(type='PolyLR', eta_min=1e-6, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

# Semantic FPN + PVTv2-b2, ADE20K 512x512, 80k iterations (PVT recipe: AdamW
# lr 1e-4 wd 1e-4, poly decay power 0.9, 16 images/batch).
_base_ = './_base_/fpn_ade20k_80k.py'
pretrained = 'checkpoints/pvt_v2_b2.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='PVTv2',
        arch='b2',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

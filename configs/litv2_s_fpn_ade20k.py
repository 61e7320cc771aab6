# Semantic FPN + LITv2-S, ADE20K 512x512, 80k iterations (LITv2 paper / official
# segmentation/configs/litv2/litv2_s_fpn_r50_512x512_80k_ade20k.py: AdamW lr 1e-4
# wd 1e-4, poly decay power 0.9 to 1e-6, 8 GPUs x 2 images, drop_path_rate 0.2;
# the official segmentation backbone also normalises output 0).
_base_ = './_base_/fpn_ade20k_80k.py'
pretrained = 'checkpoints/litv2_s.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='LITv2',
        arch='s',
        drop_path_rate=0.2,
        norm_first_output=True,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

param_scheduler = [
    dict(type='PolyLR', eta_min=1e-6, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

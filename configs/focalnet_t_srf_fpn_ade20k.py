# Semantic FPN + FocalNet-T (SRF), ADE20K 512x512, 80k iterations. FocalNet released
# no Semantic FPN setting; this is the PVT Semantic-FPN recipe used for every
# backbone here (AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 16 images/batch)
# with FocalNet's segmentation drop path 0.3 and focal windows 9 (the ImageNet
# 3x3 kernels are zero-padded on loading).
_base_ = './_base_/fpn_ade20k_80k.py'
pretrained = 'checkpoints/focalnet_tiny_srf.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='FocalNet',
        arch='tiny_srf',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

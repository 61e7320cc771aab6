_base_ = './focalnet_t_srf_fpn_ade20k.py'
pretrained = 'checkpoints/focalnet_small_lrf.pth'
model = dict(
    backbone=dict(arch='small_lrf', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

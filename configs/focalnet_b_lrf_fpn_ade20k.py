_base_ = './focalnet_t_srf_fpn_ade20k.py'
pretrained = 'checkpoints/focalnet_base_lrf.pth'
model = dict(
    backbone=dict(arch='base_lrf', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))

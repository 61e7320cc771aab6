_base_ = './litv2_s_fpn_ade20k.py'
pretrained = 'checkpoints/litv2_b.pth'
model = dict(
    backbone=dict(arch='b', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))

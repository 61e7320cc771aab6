_base_ = './p2t_s_fpn_ade20k.py'
pretrained = 'checkpoints/p2t_tiny.pth'
model = dict(
    backbone=dict(arch='tiny', drop_path_rate=0.1, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[48, 96, 240, 384]))

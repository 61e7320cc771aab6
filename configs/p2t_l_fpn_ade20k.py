_base_ = './p2t_s_fpn_ade20k.py'
pretrained = 'checkpoints/p2t_large.pth'
model = dict(
    backbone=dict(arch='large', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 640]))

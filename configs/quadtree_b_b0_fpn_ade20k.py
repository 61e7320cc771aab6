_base_ = './quadtree_b_fpn_ade20k.py'
pretrained = 'checkpoints/quadtree_b0.pth'  # official QuadTreeAttention_cls/b0.pth
model = dict(
    backbone=dict(arch='b0', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[32, 64, 160, 256]))

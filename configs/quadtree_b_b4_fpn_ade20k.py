_base_ = './quadtree_b_fpn_ade20k.py'
pretrained = 'checkpoints/quadtree_b4.pth'  # official QuadTreeAttention_cls/b4.pth
model = dict(
    backbone=dict(arch='b4', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

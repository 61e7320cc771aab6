_base_ = './quadtree_b_maskrcnn_coco.py'
pretrained = 'checkpoints/quadtree_b3.pth'  # official QuadTreeAttention_cls/b3.pth
model = dict(
    backbone=dict(arch='b3', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

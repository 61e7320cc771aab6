_base_ = './quadtree_b_retinanet_coco.py'
pretrained = 'checkpoints/quadtree_b1.pth'  # official QuadTreeAttention_cls/b1.pth
model = dict(
    backbone=dict(arch='b1', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

_base_ = './pvtv2_b2_maskrcnn_coco.py'
pretrained = 'checkpoints/pvt_v2_b1.pth'
model = dict(
    backbone=dict(arch='b1', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64,128,320,512]))

_base_ = './pvtv2_b2_maskrcnn_coco.py'
pretrained = 'checkpoints/pvt_v2_b0.pth'
model = dict(
    backbone=dict(arch='b0', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[32,64,160,256]))

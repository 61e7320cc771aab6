_base_ = './pvtv2_b2_maskrcnn_coco.py'
pretrained = 'checkpoints/pvt_v2_b2_li.pth'
model = dict(
    backbone=dict(arch='b2_li', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[64,128,320,512]))

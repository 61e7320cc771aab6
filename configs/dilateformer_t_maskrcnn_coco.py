_base_ = './dilateformer_s_maskrcnn_coco.py'
pretrained = 'checkpoints/dilateformer_tiny.pth'
model = dict(
    backbone=dict(arch='tiny', drop_path_rate=0.1, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[72, 144, 288, 576]))

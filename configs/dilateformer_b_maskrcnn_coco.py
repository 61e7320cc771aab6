_base_ = './dilateformer_s_maskrcnn_coco.py'
pretrained = 'checkpoints/dilateformer_base.pth'
model = dict(
    backbone=dict(arch='base', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

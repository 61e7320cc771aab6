_base_ = './focalnet_t_srf_retinanet_coco.py'
pretrained = 'checkpoints/focalnet_tiny_lrf.pth'
model = dict(
    backbone=dict(arch='tiny_lrf', init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

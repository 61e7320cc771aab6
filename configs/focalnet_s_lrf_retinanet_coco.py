_base_ = './focalnet_t_srf_retinanet_coco.py'
pretrained = 'checkpoints/focalnet_small_lrf.pth'
model = dict(
    backbone=dict(arch='small_lrf', drop_path_rate=0.2, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[96, 192, 384, 768]))

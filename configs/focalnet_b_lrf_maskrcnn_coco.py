_base_ = './focalnet_t_srf_maskrcnn_coco.py'
pretrained = 'checkpoints/focalnet_base_lrf.pth'
model = dict(
    backbone=dict(arch='base_lrf', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))

_base_ = './focalnet_t_srf_upernet_ade20k.py'
pretrained = 'checkpoints/focalnet_small_srf.pth'
model = dict(
    backbone=dict(arch='small_srf', init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))

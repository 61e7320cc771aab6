_base_ = './litv2_s_upernet_ade20k.py'
pretrained = 'checkpoints/litv2_m.pth'
model = dict(
    backbone=dict(arch='m', drop_path_rate=0.2, init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))

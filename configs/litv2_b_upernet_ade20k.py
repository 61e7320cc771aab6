_base_ = './litv2_s_upernet_ade20k.py'
pretrained = 'checkpoints/litv2_b.pth'
model = dict(
    backbone=dict(arch='b', drop_path_rate=0.3, init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[128, 256, 512, 1024]),
    auxiliary_head=dict(in_channels=512))

_base_ = './dilateformer_s_upernet_ade20k.py'
pretrained = 'checkpoints/dilateformer_tiny.pth'
model = dict(
    backbone=dict(arch='tiny', drop_path_rate=0.1, init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(in_channels=[72, 144, 288, 576]),
    auxiliary_head=dict(in_channels=288))

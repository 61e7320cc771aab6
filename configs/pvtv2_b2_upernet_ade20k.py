# UperNet + PVTv2-b2, ADE20K 512x512, 160k iterations (Swin/UperNet recipe:
# AdamW lr 6e-5 wd 0.01, linear warm-up 1500 iterations, poly decay, 16 images/batch).
_base_ = './_base_/upernet_ade20k_160k.py'
pretrained = 'checkpoints/pvt_v2_b2.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='PVTv2',
        arch='b2',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))

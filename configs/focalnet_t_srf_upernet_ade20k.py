# UperNet + FocalNet-T (SRF), ADE20K 512x512, 160k iterations, the FocalNet recipe
# (microsoft/FocalNet segmentation/configs/focalnet/
# upernet_focalnet_tiny_patch4_512x512_160k_ade20k_srf.py): AdamW lr 6e-5 wd 0.01
# (no decay on norms), linear warm-up 1500 iterations, poly decay (power 1),
# 16 images/batch (8 GPUs x 2), drop path 0.3, focal windows 9 (the ImageNet 3x3
# kernels are zero-padded on loading).
_base_ = './_base_/upernet_ade20k_160k.py'
pretrained = 'checkpoints/focalnet_tiny_srf.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='FocalNet',
        arch='tiny_srf',
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))

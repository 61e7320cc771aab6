# UperNet + LITv2-S, ADE20K 512x512, 160k iterations. The LITv2 paper and
# repository have no UperNet model; this follows the Swin/UperNet recipe
# (AdamW lr 6e-5 wd 0.01, linear warm-up 1500 iterations, poly decay,
# 8 GPUs x 2 images) with LITv2's segmentation backbone settings
# (drop_path_rate 0.2, output 0 normalised).
_base_ = './_base_/upernet_ade20k_160k.py'
pretrained = 'checkpoints/litv2_s.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='LITv2',
        arch='s',
        drop_path_rate=0.2,
        norm_first_output=True,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))

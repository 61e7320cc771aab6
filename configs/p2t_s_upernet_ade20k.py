# UperNet + P2T-Small, ADE20K 512x512, 160k iterations. The P2T paper and repository give
# no UperNet recipe; this is the Swin/UperNet one (AdamW lr 6e-5 wd 0.01, no decay on
# norms, linear warm-up 1500 iterations, poly decay power 1.0, 8 GPUs x 2 images) with
# P2T's dense drop_path_rate 0.1.
_base_ = './_base_/upernet_ade20k_160k.py'
pretrained = 'checkpoints/p2t_small.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='P2T',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))

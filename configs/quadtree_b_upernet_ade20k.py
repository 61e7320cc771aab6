# UperNet + QuadTree-B-b2, ADE20K 512x512, 160k iterations.  QuadTree has no
# official UperNet config; this is the Swin/UperNet recipe (AdamW lr 6e-5 wd 0.01,
# no decay on norms, 1500-iteration linear warm-up, poly decay power 1.0,
# 8 GPUs x 2 images) with the official dense backbone settings (drop_path_rate 0.1,
# top-k [32] * 4, ReLU value branches).  Test images whose sides are not multiples
# of 32 are padded inside the backbone and its features cropped back.
_base_ = './_base_/upernet_ade20k_160k.py'
# official ImageNet release QuadTreeAttention_cls/b2.pth, saved under this name
pretrained = 'checkpoints/quadtree_b2.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='QuadTree',
        arch='b2',
        attn_type='B',
        topks=[32, 32, 32, 32],
        value_branch_act='ReLU',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))

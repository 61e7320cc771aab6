# UperNet + QuadTree-B-b2, ADE20K 512x512, 160k iterations.  QuadTree has no
# official UperNet config; this is the Swin/UperNet recipe (AdamW lr 6e-5 wd 0.01,
# no decay on norms, 1500-iteration linear warm-up, poly decay power 1.0,
# 8 GPUs x 2 images) with the official dense backbone settings (drop_path_rate 0.1,
# top-k [32] * 4, ReLU value branches).  Test images whose sides are not multiples
# of 32 are padded inside the backbone and its features cropped back.
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/quadtree_b_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

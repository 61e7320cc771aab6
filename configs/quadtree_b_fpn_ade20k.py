# Semantic FPN + QuadTree-B-b2, ADE20K 512x512, 160k iterations, QuadTree's recipe
# and official dense backbone settings (drop_path_rate 0.1, top-k [32] * 4, ReLU
# value branches).
_base_ = ['./_base_/quadtree_fpn_ade20k_160k.py', './_base_/backbones/quadtree_b_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# Semantic FPN + QuadTree-B-b0, ADE20K: the recipe of quadtree_b_fpn_ade20k.py.
_base_ = ['./_base_/quadtree_fpn_ade20k_160k.py', './_base_/backbones/quadtree_b_b0.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

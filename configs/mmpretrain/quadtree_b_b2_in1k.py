# QuadTree-B-b2 on ImageNet-1k with the paper's recipe (Tangshitao/QuadTreeAttention
# classification/, the PVTv2 code base: configs/quadtree/b2.py, drop path 0.1): the DeiT
# recipe of ../_base_/in1k_deit_300e.py; trained from scratch.  The ImageNet model's attention
# keeps the top 8 tokens at every level and uses GELU in the value branches
# (classification/quadtree_attention.py), unlike the dense default (top-k 32, ReLU).
_base_ = ['../_base_/in1k_deit_300e.py', '../_base_/backbones/quadtree_b_b2.py']

model = dict(backbone=dict(_base_.backbone, out_indices=(3, ), topks=[8, 8, 8, 8],
                           value_branch_act='GELU', init_cfg=None),
             head=dict(in_channels=_base_.backbone_channels[-1]))

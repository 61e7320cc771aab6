# QuadTree-B-b2 on ImageNet-1k with the paper's recipe (Tangshitao/QuadTreeAttention
# classification/, the PVTv2 code base: configs/quadtree/b2.py, drop path 0.1): the DeiT
# recipe of pvtv2_b2_in1k.py.  The ImageNet model's attention keeps the top 8 tokens at every
# level and uses GELU in the value branches (classification/quadtree_attention.py), unlike the
# dense default (top-k 32, ReLU).
_base_ = ['./pvtv2_b2_in1k.py']

model = dict(backbone=dict(_delete_=True, type='QuadTree', arch='b2', out_indices=(3, ),
                           topks=[8, 8, 8, 8], value_branch_act='GELU', drop_path_rate=0.1),
             head=dict(in_channels=512))

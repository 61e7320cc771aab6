# Mask R-CNN + QuadTree-B-b4, COCO 1x: the recipe of quadtree_b_maskrcnn_coco.py.
_base_ = ['./_base_/pvt_maskrcnn_coco_1x.py', './_base_/backbones/quadtree_b_b4.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

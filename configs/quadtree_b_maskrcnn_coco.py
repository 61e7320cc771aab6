# Mask R-CNN + QuadTree-B-b2, COCO 1x, QuadTree's recipe and official dense backbone
# settings (drop_path_rate 0.1, top-k [32] * 4, ReLU value branches).
_base_ = ['./_base_/pvt_maskrcnn_coco_1x.py', './_base_/backbones/quadtree_b_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

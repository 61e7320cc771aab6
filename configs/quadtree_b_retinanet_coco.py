# RetinaNet + QuadTree-B-b2, COCO 1x (official detection/configs/quadtree/
# retinanet_quadtree_b2_fpn_1x_coco.py, whose result the QuadTree README reports,
# 46.2 box AP: AdamW lr 1e-4 wd 1e-4, 12 epochs, steps at 8 and 11, 500-iteration
# linear warm-up, 1333x800, 8 GPUs x 2 images; FPN from stage 2 with extra convs on
# the input; the official dense backbone uses drop_path_rate 0.1, top-k [32] * 4 and
# ReLU value branches).
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/quadtree_b_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

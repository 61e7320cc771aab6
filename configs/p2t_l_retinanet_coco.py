# RetinaNet + P2T-Large, COCO 1x: the recipe of p2t_s_retinanet_coco.py.
# (Its official config does not build as released either: see p2t_s_retinanet_coco.py.)
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/p2t_l.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

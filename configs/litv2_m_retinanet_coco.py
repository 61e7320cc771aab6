# RetinaNet + LITv2-M, COCO 1x: the recipe of litv2_s_retinanet_coco.py.
_base_ = ['./_base_/litv2_retinanet_coco_1x.py', './_base_/backbones/litv2_m.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

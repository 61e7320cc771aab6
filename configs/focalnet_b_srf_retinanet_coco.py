# RetinaNet + FocalNet-B (SRF), COCO 1x: the recipe of focalnet_t_srf_retinanet_coco.py.
_base_ = ['./_base_/focalnet_retinanet_coco_1x.py', './_base_/backbones/focalnet_b_srf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

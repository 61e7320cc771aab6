# RetinaNet + LITv2-S, COCO 1x single-scale: the official recipe
# (_base_/litv2_retinanet_coco_1x.py), drop_path_rate 0.2.
_base_ = ['./_base_/litv2_retinanet_coco_1x.py', './_base_/backbones/litv2_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

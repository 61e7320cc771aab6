# RetinaNet + LITv2-B, COCO 1x: the recipe of litv2_s_retinanet_coco.py.
_base_ = ['./_base_/litv2_retinanet_coco_1x.py', './_base_/backbones/litv2_b.py']
# official: with_cp (use_checkpoint=True) for LITv2-B detection
model = dict(backbone=dict(_base_.backbone, _delete_=True, with_cp=True),
             neck=dict(in_channels=_base_.backbone_channels))

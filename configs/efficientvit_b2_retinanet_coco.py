# RetinaNet + EfficientViT-B2, COCO 1x. The official EfficientViT has no detection recipe: this is
# the PVT-style recipe the other families use (AdamW lr 1e-4 wd 1e-4, 1333x800, 16 images/batch).
# norm_eval: the backbone's BatchNorm keeps its ImageNet statistics (2 images per GPU).
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/efficientvit_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, norm_eval=True),
             neck=dict(in_channels=_base_.backbone_channels))

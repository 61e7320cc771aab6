# DINO 4-scale + FocalNet-T (LRF), COCO 12 epochs, mmdet's DINO recipe
# (dino_4scale_coco_12e.py). FocalNet's DINO runs (FocalNet/FocalNet-DINO) are of FocalNet-L
# and larger, all with large receptive fields (3-4 focal levels); the tiny one here is
# LRF too, with FocalNet-DINO's drop path 0.3.
_base_ = ['./_base_/dino_4scale_coco_12e.py', './_base_/backbones/focalnet_t_lrf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3,
                           out_indices=(1, 2, 3)),
             neck=dict(in_channels=_base_.backbone_channels[1:]))

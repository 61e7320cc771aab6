# Semantic FPN + EfficientViT-B2, ADE20K 512x512, 80k iterations (the PVT Semantic FPN recipe:
# AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 16 images/batch).
_base_ = ['./_base_/fpn_ade20k_80k.py', './_base_/backbones/efficientvit_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

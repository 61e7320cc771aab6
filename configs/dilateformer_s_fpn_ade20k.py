# Semantic FPN + DilateFormer-S, ADE20K 512x512, 80k iterations, with the recipe of
# _base_/dilateformer_fpn_ade20k_80k.py (the paper released no dense recipe).
_base_ = ['./_base_/dilateformer_fpn_ade20k_80k.py', './_base_/backbones/dilateformer_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

# Semantic FPN + DilateFormer-B, ADE20K: the recipe of dilateformer_s_fpn_ade20k.py.
_base_ = ['./_base_/dilateformer_fpn_ade20k_80k.py', './_base_/backbones/dilateformer_b.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

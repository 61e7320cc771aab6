# Semantic FPN + FocalNet-S (LRF), ADE20K: the recipe of focalnet_t_srf_fpn_ade20k.py.
_base_ = ['./_base_/fpn_ade20k_80k.py', './_base_/backbones/focalnet_s_lrf.py']
# FocalNet's segmentation drop path
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             neck=dict(in_channels=_base_.backbone_channels))

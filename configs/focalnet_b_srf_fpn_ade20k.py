# Semantic FPN + FocalNet-B (SRF), ADE20K: the recipe of focalnet_t_srf_fpn_ade20k.py.
_base_ = ['./_base_/fpn_ade20k_80k.py', './_base_/backbones/focalnet_b_srf.py']
# FocalNet's segmentation drop path
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             neck=dict(in_channels=_base_.backbone_channels))

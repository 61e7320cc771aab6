# Semantic FPN + FocalNet-T (SRF), ADE20K 512x512, 80k iterations. FocalNet released
# no Semantic FPN setting; this is the PVT Semantic-FPN recipe used for every
# backbone here (AdamW lr 1e-4 wd 1e-4, poly decay power 0.9, 16 images/batch)
# with FocalNet's segmentation drop path 0.3 and focal windows 9 (the ImageNet
# 3x3 kernels are zero-padded on loading).
_base_ = ['./_base_/fpn_ade20k_80k.py', './_base_/backbones/focalnet_t_srf.py']
# FocalNet's segmentation drop path
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             neck=dict(in_channels=_base_.backbone_channels))

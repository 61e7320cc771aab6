# Semantic FPN + LITv2-B, ADE20K: the recipe of litv2_s_fpn_ade20k.py.
_base_ = ['./_base_/fpn_ade20k_80k_8x2.py', './_base_/backbones/litv2_b.py']
# LITv2's segmentation backbone also normalises output 0
model = dict(backbone=dict(_base_.backbone, _delete_=True, norm_first_output=True),
             neck=dict(in_channels=_base_.backbone_channels))

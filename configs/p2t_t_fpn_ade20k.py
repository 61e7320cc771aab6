# Semantic FPN + P2T-Tiny, ADE20K: the recipe of p2t_s_fpn_ade20k.py.
_base_ = ['./_base_/p2t_fpn_ade20k_80k.py', './_base_/backbones/p2t_t.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

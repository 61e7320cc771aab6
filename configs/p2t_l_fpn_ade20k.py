# Semantic FPN + P2T-Large, ADE20K: the recipe of p2t_s_fpn_ade20k.py with the official
# l config's gradient clipping (max norm 35).
_base_ = ['./_base_/p2t_fpn_ade20k_80k.py', './_base_/backbones/p2t_l.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))
optim_wrapper = dict(clip_grad=dict(max_norm=35, norm_type=2))

# PVTv2-b2 on ImageNet-1k with the paper's recipe (whai362/PVT classification/, DeiT training
# code; main.py defaults + configs/pvt_v2/pvt_v2_b2.py): the DeiT recipe of
# ../_base_/in1k_deit_300e.py, drop path 0.1, trained from scratch.
_base_ = ['../_base_/in1k_deit_300e.py', '../_base_/backbones/pvtv2_b2.py']

model = dict(backbone=dict(_base_.backbone, out_indices=(3, ), init_cfg=None),
             head=dict(in_channels=_base_.backbone_channels[-1]))

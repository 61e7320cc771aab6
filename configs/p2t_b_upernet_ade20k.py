# UperNet + P2T-Base, ADE20K: the recipe of p2t_s_upernet_ade20k.py.
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/p2t_b.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

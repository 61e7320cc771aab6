# UperNet + FocalNet-S (SRF), ADE20K: the recipe of focalnet_t_srf_upernet_ade20k.py.
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/focalnet_s_srf.py']
# FocalNet's segmentation drop path
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

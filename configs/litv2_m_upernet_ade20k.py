# UperNet + LITv2-M, ADE20K: the recipe of litv2_s_upernet_ade20k.py.
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/litv2_m.py']
# LITv2's segmentation backbone also normalises output 0
model = dict(backbone=dict(_base_.backbone, _delete_=True, norm_first_output=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

# UperNet + DilateFormer-B, ADE20K: the recipe of dilateformer_s_upernet_ade20k.py.
_base_ = ['./_base_/dilateformer_upernet_ade20k_160k.py', './_base_/backbones/dilateformer_b.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

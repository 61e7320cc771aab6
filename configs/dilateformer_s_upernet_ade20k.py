# UperNet + DilateFormer-S, ADE20K 512x512, 160k iterations, with the recipe of
# _base_/dilateformer_upernet_ade20k_160k.py (the paper released no dense recipe).
_base_ = ['./_base_/dilateformer_upernet_ade20k_160k.py', './_base_/backbones/dilateformer_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

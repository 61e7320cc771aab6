# EAHead (EANet's external-attention head) + PVTv2-b2, ADE20K 512x512, 160k iterations
# (the UperNet recipe: AdamW lr 6e-5 wd 0.01, linear warm-up 1500 iterations, poly decay,
# 16 images/batch); the head reads the last stage, the FCN auxiliary head the third.
_base_ = ['./_base_/eahead_ade20k_160k.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels[-1]),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

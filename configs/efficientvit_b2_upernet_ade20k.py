# UperNet + EfficientViT-B2, ADE20K 512x512, 160k iterations (Swin/UperNet recipe:
# AdamW lr 6e-5 wd 0.01, linear warm-up 1500 iterations, poly decay, 16 images/batch).
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/efficientvit_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

# Mask2Former + PVTv2-b2, ADE20K 512x512, 160k iterations, mmseg's Mask2Former recipe
# (mask2former_ade20k_160k.py); PVTv2 published no Mask2Former run. Drop path 0.1.
_base_ = ['./_base_/mask2former_ade20k_160k.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels))

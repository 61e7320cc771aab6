# UperNet + FocalNet-T (SRF), ADE20K 512x512, 160k iterations, the FocalNet recipe
# (microsoft/FocalNet segmentation/configs/focalnet/
# upernet_focalnet_tiny_patch4_512x512_160k_ade20k_srf.py): AdamW lr 6e-5 wd 0.01
# (no decay on norms), linear warm-up 1500 iterations, poly decay (power 1),
# 16 images/batch (8 GPUs x 2), drop path 0.3, focal windows 9 (the ImageNet 3x3
# kernels are zero-padded on loading).
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/focalnet_t_srf.py']
# FocalNet's segmentation drop path
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

# UperNet + LITv2-S, ADE20K 512x512, 160k iterations. The LITv2 paper and
# repository have no UperNet model; this follows the Swin/UperNet recipe
# (AdamW lr 6e-5 wd 0.01, linear warm-up 1500 iterations, poly decay,
# 8 GPUs x 2 images) with LITv2's segmentation backbone settings
# (drop_path_rate 0.2, output 0 normalised).
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/litv2_s.py']
# LITv2's segmentation backbone also normalises output 0
model = dict(backbone=dict(_base_.backbone, _delete_=True, norm_first_output=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

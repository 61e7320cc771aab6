# Semantic FPN + LITv2-S, ADE20K 512x512, 80k iterations (LITv2 paper / official
# segmentation/configs/litv2/litv2_s_fpn_r50_512x512_80k_ade20k.py: AdamW lr 1e-4
# wd 1e-4, poly decay power 0.9 to 1e-6, 8 GPUs x 2 images, drop_path_rate 0.2;
# the official segmentation backbone also normalises output 0).
_base_ = ['./_base_/fpn_ade20k_80k_8x2.py', './_base_/backbones/litv2_s.py']
# LITv2's segmentation backbone also normalises output 0
model = dict(backbone=dict(_base_.backbone, _delete_=True, norm_first_output=True),
             neck=dict(in_channels=_base_.backbone_channels))

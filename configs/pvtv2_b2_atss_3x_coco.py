# ATSS + PVTv2-b2, COCO 3x with multi-scale training, PVTv2's recipe (whai362/PVT
# detection/configs/atss_pvt_v2_b2_fpn_3x_mstrain_fp16.py): drop path 0.1.
_base_ = ['./_base_/atss_3x_ms_coco.py', './_base_/backbones/pvtv2_b2.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

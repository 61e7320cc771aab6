# Mask R-CNN + EfficientViT-B0 on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped; trains from scratch on the CPU.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/efficientvit_b0.py']
model = dict(
    backbone=dict(_base_.backbone, _delete_=True, init_cfg=None),
    neck=dict(in_channels=_base_.backbone_channels))

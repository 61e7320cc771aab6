# Mask R-CNN + QuadTree-B-b0 on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped (official dense settings: top-k [32] * 4,
# ReLU value branches); trains from scratch on the CPU.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/quadtree_b_b0.py']
model = dict(
    backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=_base_.backbone_channels))

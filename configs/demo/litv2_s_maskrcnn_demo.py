# Mask R-CNN + a reduced LITv2 (the LITv2-S layout: attention-free first two
# stages, HiLo alpha 0.9 / local window 2 then global, deformable token merging;
# at 48/96/192/384 channels and depths 1/1/2/1) on the embedded demo shapes
# (tools/make_demo_data.py): the PVTv2-b0 demo with the backbone swapped; trains
# from scratch on the CPU.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/litv2_s.py']
model = dict(
    backbone=dict(
        _base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None,
        arch=dict(embed_dim=48, depths=[1, 1, 2, 1], num_heads=[3, 6, 12, 24],
                  alpha=0.9, local_ws=[0, 0, 2, 1])),
    neck=dict(in_channels=[48, 96, 192, 384]))

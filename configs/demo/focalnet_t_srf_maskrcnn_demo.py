# Mask R-CNN + a reduced FocalNet-T (SRF) on the embedded demo shapes: the
# tiny_srf design (2 focal levels, windows 3, 4x4 patch stem) at 1/3 of its
# width and depth (dims 32/64/128/256, depths 1/1/2/1) so that it trains from
# scratch on the CPU in a few minutes, like the PVTv2-b0 demo it inherits from.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/focalnet_t_srf.py']
model = dict(
    backbone=dict(
        _base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None,
        arch=dict(embed_dim=32, depths=[1, 1, 2, 1], mlp_ratio=4.,
                  focal_levels=[2, 2, 2, 2], focal_windows=[3, 3, 3, 3])),
    neck=dict(in_channels=[32, 64, 128, 256]))

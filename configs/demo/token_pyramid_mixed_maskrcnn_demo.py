# Mask R-CNN + a TokenPyramid that mixes two token mixers: spatial-reduction
# attention (PVTv2) in the two high-resolution stages, HiLo attention (LITv2)
# in the two low-resolution ones, at PVTv2-b0 widths; the PVTv2-b0 demo with
# the backbone swapped (embedded demo shapes, trains from scratch on the CPU).
_base_ = './pvtv2_b0_maskrcnn_demo.py'
model = dict(
    backbone=dict(
        _delete_=True, type='TokenPyramid',
        arch=dict(embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2],
                  num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4]),
        mixer=[dict(type='SpatialReductionAttention', sr_ratio=8),
               dict(type='SpatialReductionAttention', sr_ratio=4),
               dict(type='HiLoAttention'), dict(type='HiLoAttention')],
        drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=[32, 64, 160, 256]))

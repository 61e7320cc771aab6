# Mask R-CNN + P2T-Tiny on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped; trains from scratch on the CPU.
_base_ = './pvtv2_b0_maskrcnn_demo.py'
model = dict(
    backbone=dict(
        _delete_=True, type='P2T', arch='tiny', drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=[48, 96, 240, 384]))

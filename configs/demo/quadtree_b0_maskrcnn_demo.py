# Mask R-CNN + QuadTree-B-b0 on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped (official dense settings: top-k [32] * 4,
# ReLU value branches); trains from scratch on the CPU.
_base_ = './pvtv2_b0_maskrcnn_demo.py'
model = dict(
    backbone=dict(
        _delete_=True, type='QuadTree', arch='b0', attn_type='B', topks=[32, 32, 32, 32],
        value_branch_act='ReLU', drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=[32, 64, 160, 256]))

# Mask R-CNN + Agent-PVT-T on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped; trains from scratch on the CPU.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/agent_pvt_t.py']
model = dict(
    backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None),
    neck=dict(in_channels=_base_.backbone_channels))

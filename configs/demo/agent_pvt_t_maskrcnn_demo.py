# Mask R-CNN + Agent-PVT-T on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped; trains from scratch on the CPU. The
# 128x128 images give 8x8 / 4x4 late-stage maps, so the agents stay on the ImageNet
# training grids (the dense configs' 28x28 grids would hold 12-49x more agents than tokens).
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/agent_pvt_t.py']
model = dict(
    backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None,
                  agent_shapes=[(3, 3), (4, 4), (7, 7), (7, 7)]),
    neck=dict(in_channels=_base_.backbone_channels))

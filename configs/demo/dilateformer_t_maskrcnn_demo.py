# Mask R-CNN + DilateFormer on the embedded demo shapes (tools/make_demo_data.py):
# the PVTv2-b0 demo with the backbone swapped; trains from scratch on the CPU.
# The backbone is DilateFormer-T's layout (MSDA with dilations 1/2/3 in stages 1-2,
# global attention in stages 3-4, conv stem) at demo scale: half the channels and
# depths 1/1/2/1 (2.1M parameters instead of 16.7M), so it trains about as fast as
# PVTv2-b0; dropping the `arch` override gives DilateFormer-T, about 4x slower.
# Trained from scratch, so the stem's BatchNorm trains too (norm_eval=False).
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/dilateformer_t.py']
model = dict(
    backbone=dict(
        _base_.backbone, _delete_=True, drop_path_rate=0.0, norm_eval=False, init_cfg=None,
        arch=dict(embed_dim=36, depths=[1, 1, 2, 1], num_heads=[3, 6, 6, 12])),
    neck=dict(in_channels=[36, 72, 144, 288]))

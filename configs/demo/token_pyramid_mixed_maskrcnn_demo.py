# Mask R-CNN + a TokenPyramid mixing spatial-reduction attention (stages 1-2) and HiLo
# attention (stages 3-4) at PVTv2-b0 widths: the PVTv2-b0 demo with the backbone swapped
# (embedded demo shapes, tools/make_demo_data.py); trains from scratch on the CPU.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/token_pyramid_sra_hilo_b0.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0),
             neck=dict(in_channels=_base_.backbone_channels))

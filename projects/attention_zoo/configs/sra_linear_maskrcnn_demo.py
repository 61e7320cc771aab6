# Attention zoo: Mask R-CNN demo recipe + the sra_linear variant (projects/attention_zoo/README.md).
_base_ = ['../../../configs/_base_/maskrcnn_demo.py', './_base_/backbones/zoo_sra_linear.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0),
             neck=dict(in_channels=_base_.backbone_channels))

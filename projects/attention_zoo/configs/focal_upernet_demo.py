# Attention zoo: UperNet demo recipe + the focal variant (projects/attention_zoo/README.md).
_base_ = ['./_base_/zoo_upernet_demo.py', './_base_/backbones/zoo_focal.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

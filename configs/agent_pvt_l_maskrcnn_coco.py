# Mask R-CNN + Agent-PVT-L, COCO 1x, the recipe of the official
# downstream/detection/configs/agent_pvt/agent_pvt_l_mrcnn_1x_12-16-28-28.py:
# AdamW lr 2e-4 wd 1e-4, 12 epochs, drop path 0.2.
_base_ = ['./_base_/pvt_maskrcnn_coco_1x.py', './_base_/backbones/agent_pvt_l.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.2),
             neck=dict(in_channels=_base_.backbone_channels))

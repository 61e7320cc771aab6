# RetinaNet + LITv2-S, COCO 1x single-scale (LITv2 paper / official
# detection/configs/litv2/retinanet_litv2_s_fpn_1x_coco.py: AdamW lr 1e-4 wd 1e-4,
# 12 epochs, steps at 8 and 11, 1333x800, 8 GPUs x 2 images, drop_path_rate 0.2,
# trained in mixed precision (add --amp to tools/train.py for the same); unlike
# its Mask R-CNN config, the official paramwise_cfg here has no custom_keys, so
# norms keep their weight decay).
_base_ = ['./_base_/retinanet_coco_1x.py', './_base_/backbones/litv2_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

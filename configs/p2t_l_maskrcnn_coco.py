# Mask R-CNN + P2T-Large, COCO 1x: the recipe of p2t_s_maskrcnn_coco.py with the official
# l config's gradient clipping (max norm 10).
_base_ = ['./_base_/maskrcnn_coco_1x.py', './_base_/backbones/p2t_l.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))
optim_wrapper = dict(clip_grad=dict(max_norm=10, norm_type=2))

# Semantic FPN + P2T-Small, ADE20K 512x512, 80k iterations (official
# segmentation/configs/sem_fpn_p2t_s_ade20k_80k.py, whose results the P2T README reports:
# AdamW lr 1e-4 wd 1e-4, poly decay power 0.9 down to 1e-6, 8 GPUs x 2 images;
# the official dense backbone uses drop_path_rate 0.1).
_base_ = ['./_base_/p2t_fpn_ade20k_80k.py', './_base_/backbones/p2t_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))

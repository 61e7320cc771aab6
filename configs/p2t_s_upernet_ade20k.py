# UperNet + P2T-Small, ADE20K 512x512, 160k iterations. The P2T paper and repository give
# no UperNet recipe; this is the Swin/UperNet one (AdamW lr 6e-5 wd 0.01, no decay on
# norms, linear warm-up 1500 iterations, poly decay power 1.0, 8 GPUs x 2 images) with
# P2T's dense drop_path_rate 0.1.
_base_ = ['./_base_/upernet_ade20k_160k.py', './_base_/backbones/p2t_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             decode_head=dict(in_channels=_base_.backbone_channels),
             auxiliary_head=dict(in_channels=_base_.backbone_channels[2]))

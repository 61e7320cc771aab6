# P2T-Small on ImageNet-1k with the paper's recipe (yuhuan-wu/P2T main.py defaults and README
# command: 8 GPUs x 128, --drop-path 0.1): the DeiT recipe of ../_base_/in1k_deit_300e.py
# (AdamW lr 1e-3 for 1024 images, weight decay 0.05, cosine to 1e-5, Mixup / CutMix, label
# smoothing 0.1) with 20 warm-up epochs; trained from scratch.
_base_ = ['../_base_/in1k_deit_300e.py', '../_base_/backbones/p2t_s.py']

model = dict(backbone=dict(_base_.backbone, out_indices=(3, ), init_cfg=None),
             head=dict(in_channels=_base_.backbone_channels[-1]))

warmup_epochs = 20
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]

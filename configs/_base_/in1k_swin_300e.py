# ImageNet-1k classification, 300 epochs, the Swin recipe that LITv2 (ziplab/LITv2
# classification/, config.py) and FocalNet (microsoft/FocalNet) train with: the DeiT recipe of
# in1k_deit_300e.py (AdamW lr 1e-3 for 1024 images, weight decay 0.05, cosine to 1e-5,
# Mixup 0.8 / CutMix 1.0, label smoothing 0.1, RandAugment, random erasing 0.25) with 20
# warm-up epochs and gradient clipping at norm 5.0.
_base_ = './in1k_deit_300e.py'

warmup_epochs = 20
optim_wrapper = dict(clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]

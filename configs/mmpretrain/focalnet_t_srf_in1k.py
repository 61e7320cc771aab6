# FocalNet-T (SRF) on ImageNet-1k with the paper's recipe (Yang et al. 2022, Sec. 4.1, the Swin
# recipe; microsoft/FocalNet configs/focalnet_tiny_srf.yaml): 300 epochs, batch 1024, AdamW lr
# 1e-3, weight decay 0.05, 20 warm-up epochs, cosine to 1e-5, gradient clipping 5.0, drop path
# 0.2, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, RandAugment, random erasing 0.25.  The
# ImageNet model uses focal windows 3 (the dense variants use 9) and its final LayerNorm is
# the last stage's output norm (the dense output norms of stages 0-2 are unused, hence the
# inherited find_unused_parameters).
_base_ = ['./litv2_s_in1k.py']

model = dict(
    backbone=dict(
        _delete_=True, type='FocalNet', out_indices=(3, ), drop_path_rate=0.2,
        arch=dict(embed_dim=96, depths=[2, 2, 6, 2], focal_levels=[2, 2, 2, 2],
                  focal_windows=[3, 3, 3, 3], conv_stem_padding=2)),
    head=dict(in_channels=768))

optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.0, bias_decay_mult=0.0,
                                        flat_decay_mult=0.0))

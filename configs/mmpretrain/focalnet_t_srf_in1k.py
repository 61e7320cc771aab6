# FocalNet-T (SRF) on ImageNet-1k with the paper's recipe (Yang et al. 2022, Sec. 4.1;
# microsoft/FocalNet configs/focalnet_tiny_srf.yaml): the Swin recipe of
# ../_base_/in1k_swin_300e.py, drop path 0.2, no weight decay on norms, biases and 1-d
# parameters; trained from scratch.  The ImageNet model uses focal windows 3 (the dense
# variants use 9) and its final LayerNorm is the last stage's output norm.
_base_ = ['../_base_/in1k_swin_300e.py', '../_base_/backbones/focalnet_t_srf.py']

model = dict(
    backbone=dict(_base_.backbone, out_indices=(3, ), drop_path_rate=0.2, init_cfg=None,
                  arch=dict(embed_dim=96, depths=[2, 2, 6, 2], focal_levels=[2, 2, 2, 2],
                            focal_windows=[3, 3, 3, 3], conv_stem_padding=2)),
    head=dict(in_channels=_base_.backbone_channels[-1]))

optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.0, bias_decay_mult=0.0,
                                        flat_decay_mult=0.0))
# the dense output norms of stages 0-2 are unused by the classifier
find_unused_parameters = True

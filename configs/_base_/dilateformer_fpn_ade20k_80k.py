# Semantic FPN on ADE20K for DilateFormer (no official dense recipe): the PVT Semantic-FPN
# recipe of fpn_ade20k_80k.py without weight decay on norms.
_base_ = './fpn_ade20k_80k.py'

optim_wrapper = dict(paramwise_cfg=dict(norm_decay_mult=0.))

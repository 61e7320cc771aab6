# UperNet on ADE20K for DilateFormer (no official dense recipe): the Swin/UperNet recipe of
# upernet_ade20k_160k.py with no weight decay on any norm (norm_decay_mult).
_base_ = './upernet_ade20k_160k.py'

optim_wrapper = dict(paramwise_cfg=dict(_delete_=True, norm_decay_mult=0.))

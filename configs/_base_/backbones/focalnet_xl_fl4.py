# FocalNet-XL (4 focal levels, Yang et al. 2022) for the dense configs; weights: the official
# ImageNet-22k release at 384 px (as downloaded). Drop path 0.3, FocalNet-B's detection
# value: FocalNet publishes no Mask R-CNN recipe for L/XL/H.
_base_ = './focalnet_common.py'
pretrained = 'https://github.com/microsoft/FocalNet/releases/download/v1.0.0/focalnet_xlarge_lrf_384_fl4.pth'
backbone = dict(arch='xlarge_fl4', drop_path_rate=0.3,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [256, 512, 1024, 2048]

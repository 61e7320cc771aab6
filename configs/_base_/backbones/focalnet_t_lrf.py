# FocalNet-T (LRF, Yang et al. 2022) for the dense configs; weights: the
# official ImageNet-1k release (as downloaded).
_base_ = './focalnet_common.py'
pretrained = 'https://github.com/microsoft/FocalNet/releases/download/v1.0.0/focalnet_tiny_lrf.pth'
backbone = dict(arch='tiny_lrf', drop_path_rate=0.1,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [96, 192, 384, 768]

# FocalNet-H (4 focal levels, Yang et al. 2022) for the dense configs; weights: the official
# ImageNet-22k release at 224 px (as downloaded). Drop path 0.3, FocalNet-B's detection
# value: FocalNet publishes no Mask R-CNN recipe for L/XL/H.
_base_ = './focalnet_common.py'
pretrained = 'https://projects4jw.blob.core.windows.net/focalnet/release/classification/focalnet_huge_lrf_224_fl4.pth'
backbone = dict(arch='huge_fl4', drop_path_rate=0.3,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [352, 704, 1408, 2816]

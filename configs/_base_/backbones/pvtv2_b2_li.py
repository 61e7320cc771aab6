# PVTv2-b2_li (Wang et al. 2022), its four stage outputs for the dense configs.
# Weights: the official ImageNet-1k release (as downloaded).
pretrained = 'https://github.com/whai362/PVT/releases/download/v2/pvt_v2_b2_li.pth'
backbone = dict(type='PVTv2', arch='b2_li', drop_path_rate=0.1, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 512]

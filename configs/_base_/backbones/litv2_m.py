# LITv2-M (Pan et al. 2022), its four stage outputs for the dense configs.
# Weights: the official ImageNet-1k release (as downloaded).
pretrained = 'https://github.com/ziplab/LITv2/releases/download/v1.0/litv2_m.pth'
backbone = dict(type='LITv2', arch='m', drop_path_rate=0.2, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [96, 192, 384, 768]

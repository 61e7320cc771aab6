# EfficientViT-B0 (MIT, Cai et al. 2023), its four stage outputs (official stage1..stage4) for
# the dense configs. No stochastic depth (the official backbone has none); BatchNorm.
# No B0 ImageNet checkpoint is published (the official model zoo names this local file;
# B1-B3 are released): supply it yourself or set init_cfg=None.
pretrained = 'checkpoints/efficientvit_b0_r224.pt'
backbone = dict(type='EfficientViT', arch='b0', drop_path_rate=0.0, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [16, 32, 64, 128]

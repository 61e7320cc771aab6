# EfficientViT-B2 (MIT, Cai et al. 2023), its four stage outputs (official stage1..stage4) for
# the dense configs. No stochastic depth (the official backbone has none); BatchNorm.
# Weights: the official ImageNet-1k release (as downloaded; {'state_dict': backbone.* + head.*}).
pretrained = 'https://huggingface.co/han-cai/efficientvit-cls/resolve/main/efficientvit_b2_r224.pt'
backbone = dict(type='EfficientViT', arch='b2', drop_path_rate=0.0, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [48, 96, 192, 384]

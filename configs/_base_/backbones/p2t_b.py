# P2T-Base (Wu et al. 2022), its four stage outputs for the dense configs.
# Weights: the official ImageNet-1k release (as downloaded).
# Download it by hand from Google Drive and save it under this name:
# https://drive.google.com/file/d/1iZoWexUTPUDSIZiJHNRt2zZl2kFj68F4/view?usp=sharing
pretrained = 'checkpoints/p2t_base.pth'
backbone = dict(type='P2T', arch='base', drop_path_rate=0.3, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 512]

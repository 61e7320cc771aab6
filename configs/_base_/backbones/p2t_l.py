# P2T-Large (Wu et al. 2022), its four stage outputs for the dense configs.
# Weights: the official ImageNet-1k release (as downloaded).
# Download it by hand from Google Drive and save it under this name:
# https://drive.google.com/file/d/13jBJ7ShDJd1juViC-zPtfLXYPRwkNfya/view?usp=sharing
pretrained = 'checkpoints/p2t_large.pth'
backbone = dict(type='P2T', arch='large', drop_path_rate=0.3, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 640]

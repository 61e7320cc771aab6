# DilateFormer-B (Jiao et al. 2023) for the dense configs; weights: the official
# ImageNet-1k release (DeiT-style {'model', 'model_ema', ...}; 'model' is loaded).
_base_ = './dilateformer_common.py'
# Download it by hand from Google Drive and save it under this name:
# https://drive.google.com/drive/folders/1r8PDAQyccI6lKMIuaejin-AI1VW16Fvb?usp=sharing
pretrained = 'checkpoints/dilateformer_base.pth'
backbone = dict(arch='base', drop_path_rate=0.3,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [96, 192, 384, 768]

# DilateFormer-T (Jiao et al. 2023) for the dense configs; weights: the official
# ImageNet-1k release (DeiT-style {'model', 'model_ema', ...}; 'model' is loaded).
_base_ = './dilateformer_common.py'
pretrained = 'checkpoints/dilateformer_tiny.pth'
backbone = dict(arch='tiny', drop_path_rate=0.1,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [72, 144, 288, 576]

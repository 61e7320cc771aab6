# DilateFormer-S (Jiao et al. 2023) for the dense configs; weights: the official
# ImageNet-1k release (DeiT-style {'model', 'model_ema', ...}; 'model' is loaded).
_base_ = './dilateformer_common.py'
pretrained = 'checkpoints/dilateformer_small.pth'
backbone = dict(arch='small', drop_path_rate=0.2,
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [72, 144, 288, 576]

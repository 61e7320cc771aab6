# LITv2-S on ImageNet-1k with the paper's recipe (ziplab/LITv2 classification/, the Swin code:
# config.py + configs/litv2-small.yaml, 8 GPUs x 128): AdamW lr 5e-4 x 1024 / 512 = 1e-3,
# weight decay 0.05, 20 warm-up epochs, cosine to 1e-5, gradient clipping 5.0, drop path 0.2,
# 0.01 x lr for the deformable token-merging offsets (OFFSET_LR_MULTI), Mixup 0.8 / CutMix 1.0,
# label smoothing 0.1, RandAugment, random erasing 0.25.  The classifier's final LayerNorm is
# the last stage's output norm of the backbone.
_base_ = ['./pvtv2_b2_in1k.py']

model = dict(backbone=dict(_delete_=True, type='LITv2', arch='s', out_indices=(3, ),
                           drop_path_rate=0.2),
             head=dict(in_channels=768))

warmup_epochs = 20
optim_wrapper = dict(
    clip_grad=dict(max_norm=5.0),
    paramwise_cfg=dict(custom_keys={'.conv_offset': dict(lr_mult=0.01)}))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
# the backbone's output norms of stages 1-2 are dense-only: unused by the classifier
find_unused_parameters = True

# ImageNet-1k classification, 300 epochs, the DeiT recipe that PVTv2 (whai362/PVT
# classification/, main.py defaults + configs/pvt_v2/pvt_v2_b2.py) and the families built on
# its code use: 8 GPUs x 128 images, AdamW lr 5e-4 x 1024 / 512 = 1e-3, weight decay 0.05
# (none on norms and biases), 5 linear warm-up epochs from 1e-6, cosine to 1e-5,
# RandAugment rand-m9-mstd0.5-inc1, random erasing 0.25, Mixup 0.8 / CutMix 1.0, label
# smoothing 0.1; test: resize 256 + centre crop 224 (bicubic).  `auto_scale_lr` rescales
# the lr for other total batch sizes.  A config adds the backbone (its last stage only)
# and the head's in_channels.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
    './vattn_runtime.py',
]

model = dict(
    type='ImageClassifier',
    data_preprocessor={{_base_.data_preprocessor}},
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
        cal_acc=False),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

train_dataloader = dict(batch_size=128)  # x 8 GPUs = 1024

warmup_epochs = 5
optim_wrapper = dict(optimizer=dict(lr=5e-4 * 1024 / 512))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]

# PVTv2-b2 on ImageNet-1k with the paper's recipe (whai362/PVT classification/, DeiT training
# code; main.py defaults + configs/pvt_v2/pvt_v2_b2.py): 300 epochs on 8 GPUs x 128 images,
# AdamW lr 5e-4 x 1024 / 512 = 1e-3, weight decay 0.05 (none on norms and biases), 5 linear
# warm-up epochs from 1e-6, cosine to 1e-5, drop path 0.1, RandAugment rand-m9-mstd0.5-inc1,
# random erasing 0.25, Mixup 0.8 / CutMix 1.0, label smoothing 0.1; test: resize 256 +
# centre crop 224 (bicubic).  `auto_scale_lr` rescales the lr for other total batch sizes.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    data_preprocessor={{_base_.data_preprocessor}},
    backbone=dict(type='PVTv2', arch='b2', out_indices=(3, ), drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
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

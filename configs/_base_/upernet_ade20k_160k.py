# UperNet on ADE20K 512x512, 160k iterations, with the Swin/UperNet recipe that every
# family's `*_upernet_ade20k.py` uses: AdamW lr 6e-5 wd 0.01 (no decay on norms),
# linear warm-up 1500 iterations scaling a poly decay (power 1) counted from iteration 0, as
# mmcv 1.x ran it for the official Swin / FocalNet runs, 16 images/batch (8 GPUs x 2).
# A family config adds its backbone and the heads' in_channels.
_base_ = [
    'mmseg::_base_/models/upernet_r50.py',
    'mmseg::_base_/datasets/ade20k.py',
    'mmseg::_base_/schedules/schedule_160k.py',
    'mmseg::_base_/default_runtime.py',
    './vattn_runtime.py',
]

crop_size = (512, 512)
model = dict(
    data_preprocessor=dict(size=crop_size),
    pretrained=None,
    decode_head=dict(num_classes=150),
    auxiliary_head=dict(num_classes=150))

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=0, end=160000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)
auto_scale_lr = dict(enable=False, base_batch_size=16)

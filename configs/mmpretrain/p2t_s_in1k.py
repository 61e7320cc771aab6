# P2T-Small on ImageNet-1k with the paper's recipe (yuhuan-wu/P2T main.py defaults and README
# command: 8 GPUs x 128, --drop-path 0.1): the DeiT recipe of pvtv2_b2_in1k.py (AdamW lr 1e-3
# for 1024 images, weight decay 0.05, cosine to 1e-5, Mixup / CutMix, label smoothing 0.1)
# with 20 warm-up epochs.
_base_ = ['./pvtv2_b2_in1k.py']

model = dict(backbone=dict(_delete_=True, type='P2T', arch='small', out_indices=(3, ),
                           drop_path_rate=0.1),
             head=dict(in_channels=512))

warmup_epochs = 20
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]

# DilateFormer-S on ImageNet-1k with the official training recipe (JIAOJIAYUASD/dilateformer
# dist_train.sh + main.py, DeiT code): 8 GPUs x 128, `--lr 1e-3` which main.py scales by
# batch / 512 (= 2e-3 for 1024 images), weight decay 0.05, 10 warm-up epochs from 1e-6, cosine
# to 1e-5, drop path 0.1, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, RandAugment, random
# erasing 0.25; trained from scratch.  The classifier's final LayerNorm (eps 1e-6) is the
# last stage's output norm; the stem's BatchNorm trains (no norm_eval).
_base_ = ['../_base_/in1k_deit_300e.py', '../_base_/backbones/dilateformer_s.py']

model = dict(backbone=dict(_base_.backbone, out_indices=(3, ), drop_path_rate=0.1,
                           norm_eval=False, init_cfg=None),
             head=dict(in_channels=_base_.backbone_channels[-1]))

warmup_epochs = 10
optim_wrapper = dict(optimizer=dict(lr=1e-3 * 1024 / 512))
param_scheduler = [
    dict(type='LinearLR', start_factor=5e-4, by_epoch=True, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
# the output norms of stages 0-2 are dense-only: unused by the classifier
find_unused_parameters = True

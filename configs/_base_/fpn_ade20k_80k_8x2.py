# Semantic FPN on ADE20K 512x512, 80k iterations, as the P2T and LITv2 releases run it
# (their segmentation/configs, the PVT segmentation code): the fpn_ade20k_80k recipe with
# 8 GPUs x 2 images and the poly decay ending at 1e-6.
_base_ = './fpn_ade20k_80k.py'

param_scheduler = [
    dict(type='PolyLR', eta_min=1e-6, power=0.9, begin=0, end=80000, by_epoch=False),
]
train_dataloader = dict(batch_size=2)

# Semantic FPN on ADE20K 512x512 as fpn_ade20k_80k.py, for 40k iterations (mmseg's
# schedule_40k length: validation and checkpoints every 4k, poly decay to 0 over 40k).
_base_ = './fpn_ade20k_80k.py'

param_scheduler = [
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False),
]
train_cfg = dict(max_iters=40000, val_interval=4000)
default_hooks = dict(checkpoint=dict(interval=4000))

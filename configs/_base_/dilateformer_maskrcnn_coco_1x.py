# Mask R-CNN on COCO 1x single-scale for DilateFormer. The DilateFormer paper reports COCO
# results but released no dense code or recipe; this is the Swin 1x recipe: AdamW lr 1e-4
# wd 0.05, no weight decay on norms, 12 epochs, steps at 8 and 11, 1333x800, 8 GPUs x 2.
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))

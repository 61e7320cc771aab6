# RetinaNet on COCO 1x single-scale for DilateFormer: the Swin 1x recipe of
# dilateformer_maskrcnn_coco_1x.py (the paper released no dense recipe).
_base_ = './retinanet_coco_1x.py'

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, betas=(0.9, 0.999),
                   weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))

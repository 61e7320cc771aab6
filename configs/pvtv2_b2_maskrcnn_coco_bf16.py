# Mask R-CNN + PVTv2-b2 with bfloat16 mixed precision (Ampere or newer GPUs);
# same as `tools/train.py configs/pvtv2_b2_maskrcnn_coco.py --amp-dtype bfloat16`.
_base_ = './pvtv2_b2_maskrcnn_coco.py'
optim_wrapper = dict(type='AmpOptimWrapper', dtype='bfloat16', loss_scale='dynamic')

# Mask R-CNN + PVTv2-b2 with float16 mixed precision (AmpOptimWrapper, dynamic
# loss scaling); same as `tools/train.py configs/pvtv2_b2_maskrcnn_coco.py --amp`.
_base_ = './pvtv2_b2_maskrcnn_coco.py'
optim_wrapper = dict(type='AmpOptimWrapper', dtype='float16', loss_scale='dynamic')

# UperNet + PVTv2-b2 with float16 mixed precision (AmpOptimWrapper, dynamic
# loss scaling); same as `tools/train.py configs/pvtv2_b2_upernet_ade20k.py --amp`.
_base_ = './pvtv2_b2_upernet_ade20k.py'
optim_wrapper = dict(type='AmpOptimWrapper', dtype='float16', loss_scale='dynamic')

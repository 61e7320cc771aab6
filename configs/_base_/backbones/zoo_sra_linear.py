# Attention zoo variant: linear spatial reduction (PVTv2-li): keys/values average-pooled to 7x7.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='SpatialReductionAttention', linear=True))

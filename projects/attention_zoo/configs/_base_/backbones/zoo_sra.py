# Attention zoo variant: spatial-reduction attention (PVTv2), the reference: sr_ratio 8/4/2/1.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='SpatialReductionAttention'))

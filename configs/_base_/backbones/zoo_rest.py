# Attention zoo variant: ResT efficient multi-head attention (E-MSA), sr_ratio 8/4/2/1 with
# the attention transform.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='EfficientMultiHeadAttention'))

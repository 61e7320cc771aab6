# Attention zoo variant: multi-scale dilated attention (DilateFormer), kernel 3, dilations
# 1/2/3 cut to the heads.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='MultiScaleDilatedAttention'))

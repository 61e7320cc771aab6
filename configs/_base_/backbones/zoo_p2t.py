# Attention zoo variant: pyramid pooling attention (P2T), its pooling ratios.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='PyramidPoolingAttention'))

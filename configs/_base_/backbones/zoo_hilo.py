# Attention zoo variant: HiLo attention (LITv2), window 2/2/2/1, alpha 0.9.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='HiLoAttention'))

# Attention zoo variant: global self-attention (ViT): the quadratic baseline, not matched (no knob).
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='GlobalSelfAttention'))

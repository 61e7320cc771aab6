# Attention zoo variant: shifted-window attention (Swin), window 7, shift in every second block.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='ShiftedWindowAttention'))

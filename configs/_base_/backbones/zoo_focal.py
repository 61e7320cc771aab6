# Attention zoo variant: focal modulation (FocalNet), focal level 2, window 3.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='FocalModulation'))

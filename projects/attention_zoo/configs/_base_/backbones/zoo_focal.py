# Attention zoo variant: focal modulation (FocalNet), focal level 2, window 3.
# Modulation widths (modulation_dims) 32/64/400/768: narrower where tokens are many, wider
# where they are few, as the reference spends its parameters; matches its parameters and
# GMACs (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[dict(type='FocalModulation', modulation_dims=a) for a in (32, 64, 400, 768)])

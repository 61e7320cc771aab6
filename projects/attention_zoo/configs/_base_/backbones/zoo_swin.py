# Attention zoo variant: shifted-window attention (Swin), window 7, shift in every second block.
# Inner widths (attn_dims) 32/64/320/1024: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='ShiftedWindowAttention', attn_dims=a) for a in (32, 64, 320, 1024)])

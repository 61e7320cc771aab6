# Attention zoo variant: ResT efficient multi-head attention (E-MSA), sr_ratio 8/4/2/1 with
# the attention transform.
# Inner widths (attn_dims) 32/64/480/896: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='EfficientMultiHeadAttention', attn_dims=a) for a in (32, 64, 480, 896)])

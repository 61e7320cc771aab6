# Attention zoo variant: pyramid pooling attention (P2T), its pooling ratios.
# Inner widths (attn_dims) 32/64/400/896: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='PyramidPoolingAttention', attn_dims=a) for a in (32, 64, 400, 896)])

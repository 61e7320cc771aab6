# Attention zoo variant: HiLo attention (LITv2), window 2/2/2/1, alpha 0.9.
# Inner widths (attn_dims) 32/64/480/896: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[dict(type='HiLoAttention', attn_dims=a) for a in (32, 64, 480, 896)])

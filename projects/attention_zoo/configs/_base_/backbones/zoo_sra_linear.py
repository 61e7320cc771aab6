# Attention zoo variant: linear spatial reduction (PVTv2-li): keys/values average-pooled to 7x7.
# Inner widths (attn_dims) 32/64/480/768: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='SpatialReductionAttention', linear=True, attn_dims=a) for a in (32, 64, 480, 768)])

# Attention zoo variant: MViTv2 pooling attention, keys/values pooled with stride 8/4/2/1 (the
# reference's reduction; MViTv2 uses 4/2/1/1, +15 % GMACs).
# Inner widths (attn_dims) 32/64/320/896: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='MultiScalePoolingAttention', stride_kv=s, attn_dims=a)
    for s, a in ((8, 32), (4, 64), (2, 320), (1, 896))])

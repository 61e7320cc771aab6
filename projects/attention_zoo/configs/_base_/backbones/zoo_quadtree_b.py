# Attention zoo variant: QuadTree-B attention, levels 4/3/2/1; top-k 8 (the ImageNet setting;
# the dense default 32 adds 18 % GMACs).
# Inner widths (attn_dims) 32/64/320/640: narrower where tokens are many, wider where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='QuadtreeAttention', topks=(8, 8, 8, 8), attn_dims=a) for a in (32, 64, 320, 640)])

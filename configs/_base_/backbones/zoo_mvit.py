# Attention zoo variant: MViTv2 pooling attention, keys/values pooled with stride 8/4/2/1 (the
# reference's reduction; MViTv2 uses 4/2/1/1) to match the reference GMACs.
_base_ = './zoo_common.py'
backbone = dict(mixer=[dict(type='MultiScalePoolingAttention', stride_kv=s) for s in (8, 4, 2, 1)])

# Attention zoo variant: ReLU linear attention (EfficientViT LiteMLA), 5x5 multi-scale tokens,
# head dims 16; heads_ratio 0.25/0.25/0.75/1.5: fewer heads where tokens are many, more where
# they are few, as the reference spends its parameters; matches its parameters and GMACs
# (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='LiteMLA', head_dims=16, heads_ratio=r) for r in (.25, .25, .75, 1.5)])

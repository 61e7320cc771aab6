# Attention zoo variant: ReLU linear attention (EfficientViT LiteMLA), 5x5 multi-scale
# tokens; head dims 16 and 3/4 of the heads to match the reference GMACs.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='LiteMLA', head_dims=16, heads_ratio=0.75))

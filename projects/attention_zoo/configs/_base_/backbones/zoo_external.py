# Attention zoo variant: external attention (EANet), 32 memory slots (the paper: 64); expansion
# 1/2/1/4 (the paper: 4): less where tokens are many, more where they are few, as the reference
# spends its parameters; matches its parameters and GMACs (projects/attention_zoo/README.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='ExternalAttention', expansion=e, num_slots=32) for e in (1, 2, 1, 4)])

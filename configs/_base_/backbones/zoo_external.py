# Attention zoo variant: external attention (EANet): expansion 2, 32 memory slots (half the
# paper's 4 / 64) to match the reference GMACs.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='ExternalAttention', expansion=2, num_slots=32))

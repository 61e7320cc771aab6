# Attention zoo variant: the reference with a PEG (CPVT) after the first block of each stage.
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='SpatialReductionAttention'), position=dict(type='PEG'))

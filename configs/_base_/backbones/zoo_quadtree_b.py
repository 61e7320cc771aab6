# Attention zoo variant: QuadTree-B attention, levels 4/3/2/1; top-k 8 (the ImageNet
# setting) to come closest to the reference GMACs (+9.6 %: docs/zoo.md).
_base_ = './zoo_common.py'
backbone = dict(mixer=dict(type='QuadtreeAttention', topks=(8, 8, 8, 8)))

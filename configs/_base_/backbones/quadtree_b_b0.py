# QuadTree-B-b0 (Tang et al. 2022) for the dense configs; weights: the official ImageNet-1k
# release QuadTreeAttention_cls/b0.pth (downloaded on first use).
_base_ = './quadtree_b_common.py'
pretrained = ('https://github.com/Tangshitao/QuadTreeAttention/releases/download/'
              'QuadTreeAttention_cls/b0.pth')
backbone = dict(arch='b0', init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [32, 64, 160, 256]

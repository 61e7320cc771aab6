# QuadTree-B-b3 (Tang et al. 2022) for the dense configs; weights: the official ImageNet-1k
# release QuadTreeAttention_cls/b3.pth (downloaded on first use).
_base_ = './quadtree_b_common.py'
pretrained = ('https://github.com/Tangshitao/QuadTreeAttention/releases/download/'
              'QuadTreeAttention_cls/b3.pth')
backbone = dict(arch='b3', init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 512]

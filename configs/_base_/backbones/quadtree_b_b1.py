# QuadTree-B-b1 (Tang et al. 2022) for the dense configs; weights: the official ImageNet-1k
# release (the README's GitHub link for b1 names QuadTreeAttention_cls/b2.pth).
_base_ = './quadtree_b_common.py'
# Download it by hand from Google Drive and save it under this name:
# https://drive.google.com/file/d/1NB1Yu0R7QQPmo2pgQGxDbcElRx2Nc5xj/view?usp=sharing
pretrained = 'checkpoints/quadtree_b1.pth'
backbone = dict(arch='b1', init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 512]

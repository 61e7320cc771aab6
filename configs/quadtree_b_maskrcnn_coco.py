# Mask R-CNN + QuadTree-B-b2, COCO 1x (official detection/configs/quadtree/
# mask_rcnn_quadtree_b2_fpn_1x_coco.py, whose result the QuadTree README reports,
# 46.7 box / 42.4 mask AP: AdamW lr 2e-4 wd 1e-4, 12 epochs, steps at 8 and 11,
# 500-iteration linear warm-up, 1333x800, 8 GPUs x 2 images; the official dense
# backbone uses drop_path_rate 0.1, top-k [32, 32, 32, 32] and ReLU value branches).
_base_ = './_base_/maskrcnn_coco_1x.py'

# official ImageNet release QuadTreeAttention_cls/b2.pth, saved under this name
pretrained = 'checkpoints/quadtree_b2.pth'
model = dict(
    backbone=dict(
        _delete_=True,
        type='QuadTree',
        arch='b2',
        attn_type='B',
        topks=[32, 32, 32, 32],
        value_branch_act='ReLU',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4))

# Mask R-CNN on COCO 1x as QuadTree's release trains it (official detection/configs/quadtree/
# mask_rcnn_quadtree_b2_fpn_1x_coco.py, whose result the QuadTree README reports, 46.7 box /
# 42.4 mask AP): AdamW lr 2e-4 wd 1e-4, 12 epochs, steps at 8 and 11, 500-iteration linear
# warm-up, 1333x800, 8 GPUs x 2 images.
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4))

# Mask R-CNN on COCO 1x as the PVTv2, Agent-PVT and QuadTree releases train it (whai362/PVT
# detection/configs/mask_rcnn_pvt_v2_b2_fpn_1x_coco.py and its siblings, Agent-Attention
# downstream/detection/configs/agent_pvt/agent_pvt_*_mrcnn_1x_12-16-28-28.py, QuadTreeAttention
# detection/configs/quadtree/mask_rcnn_quadtree_b*_fpn_1x_coco.py): AdamW lr 2e-4 wd 1e-4,
# 12 epochs, steps at 8 and 11, 500-iteration linear warm-up, 1333x800, 8 GPUs x 2 images.
# (Their RetinaNet configs keep lr 1e-4: retinanet_coco_1x.py.)
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(optimizer=dict(lr=2e-4))

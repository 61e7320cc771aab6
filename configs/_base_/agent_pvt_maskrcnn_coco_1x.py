# Mask R-CNN on COCO 1x as the Agent-PVT release trains it (official downstream/detection/
# configs/agent_pvt/agent_pvt_*_mrcnn_1x_12-16-28-28.py): AdamW lr 2e-4 wd 1e-4, 12 epochs,
# steps at 8 and 11, 1333x800, 8 GPUs x 2 images. (Its RetinaNet configs keep lr 1e-4:
# retinanet_coco_1x.py.)
_base_ = './maskrcnn_coco_1x.py'

optim_wrapper = dict(optimizer=dict(lr=2e-4))

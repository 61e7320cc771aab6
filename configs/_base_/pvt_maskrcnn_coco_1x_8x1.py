# Mask R-CNN on COCO 1x as the official PVTv2-b4 / b5 configs train it (whai362/PVT
# detection/configs/mask_rcnn_pvt_v2_b{4,5}_fpn_1x_coco.py): the pvt_maskrcnn_coco_1x recipe
# with 1 image per GPU (8 GPUs x 1 image) and lr 2e-4 / 1.4.
_base_ = './pvt_maskrcnn_coco_1x.py'

optim_wrapper = dict(optimizer=dict(lr=2e-4 / 1.4))
train_dataloader = dict(batch_size=1)
auto_scale_lr = dict(base_batch_size=8)

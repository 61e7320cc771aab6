# DINO 4-scale on COCO, 12 epochs, mmdet's recipe (mmdet configs/dino/
# dino-4scale_r50_8xb2-12e_coco.py, after IDEA-Research/DINO): 900 queries, denoising
# queries, AdamW lr 1e-4 wd 1e-4 with the backbone's lr x0.1, gradient clipping at 0.1, lr
# x0.1 at epoch 11, DETR's multi-scale resize, 16 images/batch (8 GPUs x 2). A backbone
# config returns its last three stages (strides 8-32, `out_indices=(1, 2, 3)`) and sets
# neck.in_channels to their channels: the ChannelMapper adds the fourth level, a stride-2
# conv on the last map.
_base_ = ['mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py', './vattn_runtime.py']

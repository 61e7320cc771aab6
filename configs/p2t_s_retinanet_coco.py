# RetinaNet + P2T-Small, COCO 1x (P2T paper / official detection/configs/retinanet_p2t_s_fpn_1x_coco.py:
# AdamW lr 1e-4 wd 1e-4, 12 epochs, steps at 8 and 11, 500-iteration linear warm-up,
# 1333x800, 8 GPUs x 2 images; the official dense backbone uses drop_path_rate 0.1).
_base_ = './_base_/retinanet_coco_1x.py'

pretrained = 'checkpoints/p2t_small.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='P2T',
        arch='small',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

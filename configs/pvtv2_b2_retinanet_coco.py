# RetinaNet + PVTv2-b2, COCO 1x (PVTv2 paper: AdamW lr 1e-4 wd 1e-4, 1333x800, 16 images/batch).
_base_ = './_base_/retinanet_coco_1x.py'

pretrained = 'checkpoints/pvt_v2_b2.pth'  # official ImageNet release, as downloaded
model = dict(
    backbone=dict(
        _delete_=True,
        type='PVTv2',
        arch='b2',
        drop_path_rate=0.1,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained)),
    neck=dict(in_channels=[64, 128, 320, 512]))

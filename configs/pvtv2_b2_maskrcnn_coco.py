# Mask R-CNN + PVTv2-b2, COCO 1x (PVTv2 paper: AdamW lr 1e-4 wd 1e-4, 1333x800, 16 images/batch).
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
custom_imports = dict(imports=['vattn_mm'], allow_failed_imports=False)

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

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, weight_decay=1e-4))
auto_scale_lr = dict(enable=False, base_batch_size=16)

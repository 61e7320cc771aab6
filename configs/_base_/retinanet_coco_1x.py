# RetinaNet on COCO, 1x schedule (12 epochs, 1333x800, 16 images/batch), with the AdamW
# lr 1e-4 wd 1e-4 optimizer of the PVT-family papers; a family config adds its backbone
# and the neck's in_channels, and overrides what its paper changes.
_base_ = [
    'mmdet::_base_/models/retinanet_r50_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
    './vattn_runtime.py',
]

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-4, weight_decay=1e-4))
auto_scale_lr = dict(enable=False, base_batch_size=16)

# mmdet 2.x single-stage heads (where the official PVT-family detectors were trained and
# evaluated) ignore min_bbox_size; mmdet 3.x's base dense head drops the boxes of zero width
# or height at min_bbox_size=0 (boxes clipped flat at the image border).  -1 keeps them, so
# a released detector gives the official detections, cap included.
model = dict(test_cfg=dict(min_bbox_size=-1))

# GFL on COCO, 3x schedule with multi-scale training, the recipe of PVTv2's release
# (whai362/PVT detection/configs/gfl_pvt_v2_b2_fpn_3x_mstrain_fp16.py): ATSS's recipe
# (atss_3x_ms_coco.py: FPN, ATSS assignment, schedule, optimizer, resize) with mmdet's GFL
# head (quality focal loss, distribution focal loss over 17 bins, GIoU loss).
_base_ = './atss_3x_ms_coco.py'

model = dict(
    type='GFL',
    bbox_head=dict(
        _delete_=True, type='GFLHead', num_classes=80, in_channels=256, stacked_convs=4,
        feat_channels=256, anchor_generator=_base_.model.bbox_head.anchor_generator,
        loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0, loss_weight=1.0),
        loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25), reg_max=16,
        loss_bbox=dict(type='GIoULoss', loss_weight=2.0)))

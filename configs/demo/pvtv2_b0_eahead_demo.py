# EAHead (EANet's external-attention head) + PVTv2-b0 on the embedded demo shapes: the
# UperNet demo (data, schedule, FCN auxiliary head) with its decode head replaced by a
# narrower EAHead on the last three stages resized to 1/8 and concatenated (EANet's head reads
# a stride-8 map; the last stage alone, 8x8 here, finds only background: mIoU 18.2).
# Trains from scratch on the CPU and reports mIoU.
_base_ = ['./pvtv2_b0_upernet_demo.py']

norm_cfg = dict(type='BN', requires_grad=True)

model = dict(
    decode_head=dict(
        _delete_=True, type='EAHead', in_channels=_base_.backbone_channels[1:], in_index=[1, 2, 3],
        input_transform='resize_concat', channels=64,
        ea_channels=128, num_slots=64, dropout_ratio=0.1, num_classes=5,
        norm_cfg=norm_cfg, align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))

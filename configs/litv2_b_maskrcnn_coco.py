_base_ = './litv2_s_maskrcnn_coco.py'
pretrained = 'checkpoints/litv2_b.pth'
model = dict(
    # official: with_cp (use_checkpoint=True) for LITv2-B detection
    backbone=dict(arch='b', drop_path_rate=0.3, with_cp=True,
                  init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[128, 256, 512, 1024]))

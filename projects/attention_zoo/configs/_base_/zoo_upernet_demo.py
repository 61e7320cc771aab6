# The UperNet demo recipe at half resolution (the 256x256 demo images resized to 128x128: 4x cheaper
# steps, as the Mask R-CNN demo recipe does), on which the attention zoo trains every variant
# (projects/attention_zoo/configs/*_upernet_demo.py, projects/attention_zoo/README.md).
_base_ = ['../../../../configs/_base_/upernet_demo.py']

crop_size = (128, 128)
model = dict(data_preprocessor=dict(size=crop_size))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='Resize', scale=crop_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=crop_size, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

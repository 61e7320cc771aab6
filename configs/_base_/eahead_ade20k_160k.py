# EAHead (EANet, Guo et al., arXiv:2105.02358) on ADE20K 512x512, 160k iterations.
# The head is EANet's segmentation head (official model_torch.py, EANet): on the backbone's
# last map a 3x3 conv-BN-ReLU to 512 channels, the external-attention unit (64 memory slots,
# softmax over the pixels then l1 over the slots, 1x1 conv + BN, + input, ReLU), a 3x3
# conv-BN-ReLU to 256 channels, dropout 0.1 and the 1x1 classifier.
# EANet's own schedule is for a dilated ResNet on VOC (SGD lr 9e-3, 45k iterations, crop 513),
# so the training recipe here is the ADE20K 160k one of every family's UperNet config
# (upernet_ade20k_160k.py: AdamW lr 6e-5 wd 0.01, warm-up 1500 iterations, poly decay,
# 16 images/batch), with its mmseg FCN auxiliary head (stage 3, loss weight 0.4).
# A family config adds its backbone and the heads' in_channels.
_base_ = ['./upernet_ade20k_160k.py']

norm_cfg = dict(type='SyncBN', requires_grad=True)  # as the UperNet heads (mmseg's base)

model = dict(
    decode_head=dict(
        _delete_=True,
        type='EAHead',
        in_channels=2048,  # the official ResNet's last stage; family configs set their own
        in_index=-1,
        channels=256,
        ea_channels=512,
        num_slots=64,
        dropout_ratio=0.1,
        num_classes=150,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))

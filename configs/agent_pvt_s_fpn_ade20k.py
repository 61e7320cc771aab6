# Semantic FPN + Agent-PVT-S, ADE20K 512x512, 40k iterations (official downstream/
# segmentation/configs/agent_pvt/fpn_agent_pvt_s_12-16-28-28.py: AdamW lr 2e-4 wd 1e-4,
# poly decay power 0.9 to 0, 8 GPUs x 2 images).
_base_ = ['./_base_/fpn_ade20k_40k.py', './_base_/backbones/agent_pvt_s.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True),
             neck=dict(in_channels=_base_.backbone_channels))
optim_wrapper = dict(optimizer=dict(lr=2e-4))
train_dataloader = dict(batch_size=2)

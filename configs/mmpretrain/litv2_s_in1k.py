# LITv2-S on ImageNet-1k with the paper's recipe (ziplab/LITv2 classification/, the Swin code:
# config.py + configs/litv2-small.yaml, 8 GPUs x 128): the Swin recipe of
# ../_base_/in1k_swin_300e.py, drop path 0.2, 0.01 x lr for the deformable token-merging
# offsets (OFFSET_LR_MULTI); trained from scratch.  The classifier's final LayerNorm is the
# last stage's output norm of the backbone.
_base_ = ['../_base_/in1k_swin_300e.py', '../_base_/backbones/litv2_s.py']

model = dict(backbone=dict(_base_.backbone, out_indices=(3, ), init_cfg=None),
             head=dict(in_channels=_base_.backbone_channels[-1]))

optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'.conv_offset': dict(lr_mult=0.01)}))
# the backbone's output norms of stages 1-2 are dense-only: unused by the classifier
find_unused_parameters = True

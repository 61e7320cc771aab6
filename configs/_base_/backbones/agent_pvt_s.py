# Agent-PVT-S (Han et al. 2024, Agent Attention), its four stage outputs for the
# dense configs: agents pooled to the 12x12 / 16x16 / 28x28 / 28x28 grids of the official
# detection and segmentation configs; drop path of its ImageNet training.
# Weights: the official ImageNet-1k release (as downloaded).
# Download it by hand from Tsinghua Cloud and save it under this name:
# https://cloud.tsinghua.edu.cn/f/36b8be9a8863456685a3/?dl=1
pretrained = 'checkpoints/agent_pvt_s_max_acc.pth'
backbone = dict(type='AgentPVT', arch='small', drop_path_rate=0.1, out_indices=(0, 1, 2, 3),
                init_cfg=dict(type='Pretrained', checkpoint=pretrained))
backbone_channels = [64, 128, 320, 512]

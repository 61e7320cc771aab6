# Attention zoo variant: agent attention (Agent-PVT): 9/16/49/49 agents on their own grid (no
# detection-size agent grids) over keys/values reduced 8/4/2/1 as in PVTv2.
_base_ = './zoo_common.py'
backbone = dict(mixer=[
    dict(type='AgentAttention', sr_ratio=sr, agent_num=num, agent_shape=(side, side))
    for sr, num, side in ((8, 9, 3), (4, 16, 4), (2, 49, 7), (1, 49, 7))])

"""Feed-forward networks over token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS
from torch import nn

from .patch_embed import Size, map_to_tokens, tokens_to_map


class MLP(nn.Module):
    """``fc1 -> act -> drop -> fc2 -> drop`` over tokens (the ViT FFN); called
    as ``mlp(tokens, hw)`` like the other FFNs, ``hw`` unused."""

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'), drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


@MODELS.register_module()
class ConvFFN(nn.Module):
    """FFN with a 3x3 depthwise convolution between its two projections
    (PVTv2, arXiv:2106.13797): ``fc1 -> [pre_act] -> dwconv -> act -> fc2``.

    Args:
        embed_dims: token channels.
        hidden_dims: hidden channels.
        act_cfg: activation after the depthwise conv.
        pre_act_cfg: optional activation right after ``fc1`` (PVTv2-li: ReLU).
        drop: dropout after the activation and after ``fc2``.
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'),
                 pre_act_cfg: Optional[dict] = None, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.pre_act = build_activation_layer(pre_act_cfg) if pre_act_cfg else nn.Identity()
        self.dwconv = nn.Conv2d(hidden_dims, hidden_dims, 3, 1, 1, groups=hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        x = self.pre_act(self.fc1(x))
        x, _ = map_to_tokens(self.dwconv(tokens_to_map(x, hw)))
        x = self.drop(self.act(x))
        return self.drop(self.fc2(x))

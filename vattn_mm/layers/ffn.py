"""Feed-forward networks over token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS
from torch import nn

from .. import ops
from .conv import DepthwiseConv2d
from .patch_embed import Size, map_to_tokens, tokens_to_map


@MODELS.register_module()
class MLP(nn.Module):
    """``fc1 -> act -> drop -> fc2 -> drop`` over tokens (the ViT FFN); called
    as ``mlp(tokens, hw)`` like the other FFNs, ``hw`` unused.

    Fast paths (:mod:`vattn_mm.ops`): in inference long sequences run
    ``chunk_tokens`` tokens at a time (``mlp_inference_chunks``;
    ``chunk_tokens=None`` turns it off) and ``fc1 + act`` is one fused call
    (``fused_act``); in training the hidden activation is recomputed in the
    backward instead of being kept (``recompute_act``).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'), drop: float = 0.,
                 chunk_tokens: Optional[int] = 4096):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)
        self.chunk_tokens = chunk_tokens
        self.mlp_inference_chunks = ops.switch('mlp_inference_chunks')
        self.fused_act = ops.switch('fused_act')
        self.recompute_act = ops.switch('recompute_act')

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        return ops.token_chunks(self._mlp, x, self.chunk_tokens, self.mlp_inference_chunks)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return self.drop(ops.act_linear(self.fc1(x), self.act, self.fc2, self.drop,
                                            self.recompute_act))
        x = ops.linear_act(x, self.fc1, self.act, self.fused_act)
        return self.drop(self.fc2(self.drop(x)))


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

    Fast paths (:mod:`vattn_mm.ops`): in eager training the FFN runs over
    groups of hidden channels and keeps only the ``fc1`` and ``dwconv``
    outputs for the backward (``ffn_hidden_groups``), else recomputes the
    activation before ``fc2`` (``recompute_act``); in inference linear / conv
    and activation are fused (``fused_act``).
    """

    def __init__(self, embed_dims: int, hidden_dims: int,
                 act_cfg: dict = dict(type='GELU'),
                 pre_act_cfg: Optional[dict] = None, drop: float = 0.):
        super().__init__()
        self.fc1 = nn.Linear(embed_dims, hidden_dims)
        self.pre_act = build_activation_layer(pre_act_cfg) if pre_act_cfg else nn.Identity()
        self.dwconv = DepthwiseConv2d(hidden_dims, 3)
        self.act = build_activation_layer(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, embed_dims)
        self.drop = nn.Dropout(drop)
        self.ffn_hidden_groups = ops.switch('ffn_hidden_groups')
        self.fused_act = ops.switch('fused_act')
        self.recompute_act = ops.switch('recompute_act')

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        return ops.in_hidden_groups(self, x, hw, self.ungrouped)

    def ungrouped(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        """The FFN over all hidden channels at once."""
        x = tokens_to_map(ops.linear_act(x, self.fc1, self.pre_act, self.fused_act), hw)
        if torch.is_grad_enabled():
            x, _ = map_to_tokens(self.dwconv(x))
            return self.drop(ops.act_linear(x, self.act, self.fc2, self.drop,
                                            self.recompute_act))
        x, _ = map_to_tokens(self.dwconv.forward_act(x, self.act))
        return self.drop(self.fc2(self.drop(x)))

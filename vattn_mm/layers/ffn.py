"""Feed-forward networks over token sequences."""
from __future__ import annotations

from typing import Optional

import torch
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS
from torch import nn

from ..utils.tracing import is_capturing
from .conv import DepthwiseConv2d
from .fused import linear_act
from .patch_embed import Size, map_to_tokens, tokens_to_map
from .recompute import act_linear


@MODELS.register_module()
class MLP(nn.Module):
    """``fc1 -> act -> drop -> fc2 -> drop`` over tokens (the ViT FFN); called
    as ``mlp(tokens, hw)`` like the other FFNs, ``hw`` unused.

    Without autograd (inference) long sequences run ``chunk_tokens`` tokens at
    a time, so the ``hidden_dims``-wide activation never exists for the whole
    map (on an 800x1344 image DilateFormer's first-stage hidden layer would be
    74 MiB twice over); every token's result is the same as unchunked.
    ``chunk_tokens=None`` turns this off.  In training the hidden activation
    is not kept for the backward (:func:`~vattn_mm.layers.recompute.act_linear`).
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

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        chunk = self.chunk_tokens
        # a captured graph would unroll the chunk loop (and freeze the token count)
        if (chunk is None or torch.is_grad_enabled() or is_capturing()
                or x.shape[:-1].numel() <= chunk):
            return self._mlp(x)
        flat = x.reshape(-1, x.shape[-1])
        first = self._mlp(flat[:chunk])  # its dtype is the output's (autocast)
        out = first.new_empty(flat.shape[0], first.shape[-1])
        out[:chunk] = first
        for start in range(chunk, flat.shape[0], chunk):
            out[start:start + chunk] = self._mlp(flat[start:start + chunk])
        return out.view(*x.shape[:-1], -1)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return self.drop(act_linear(self.fc1(x), self.act, self.fc2, self.drop))
        return self.drop(self.fc2(self.drop(linear_act(x, self.fc1, self.act))))


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

    In training the activation's output is not kept for the backward
    (:func:`~vattn_mm.layers.recompute.act_linear`).
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

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        x = tokens_to_map(linear_act(x, self.fc1, self.pre_act), hw)
        if torch.is_grad_enabled():
            x, _ = map_to_tokens(self.dwconv(x))
            return self.drop(act_linear(x, self.act, self.fc2, self.drop))
        x, _ = map_to_tokens(self.dwconv.forward_act(x, self.act))
        return self.drop(self.fc2(self.drop(x)))

"""Pixel attention, ResT's position encoding ("ResT: An Efficient Transformer
for Visual Recognition", Zhang and Yang, arXiv:2105.13677)."""
from __future__ import annotations

import torch
from torch import nn

from ..ops import DepthwiseConv2d
from .builder import register_position
from .tokens import Size, map_to_tokens, tokens_to_map


@register_position
class PixelAttention(nn.Module):
    """ResT's PA: the tokens gated by ``sigmoid(dwconv3x3(x))``, a depthwise
    3x3 convolution (zero padding, with bias) of the token map.  Called as
    ``pa(tokens, (H, W))`` it returns the gate (B, N, C); the skeleton
    multiplies the tokens by it (``combine = 'multiply'``), right after the
    stage's patch embedding (``where='embed'``, default), as ResT applies it
    after its embeddings' conv + norm.

    The convolution is ``pa_conv``, ResT's key (``pos.pa_conv.weight`` /
    ``.bias`` in a ResT patch embedding): an official PA state dict loads
    as is.  Any map size works.
    """

    default_where = 'embed'
    combine = 'multiply'

    def __init__(self, embed_dims: int, kernel_size: int = 3):
        super().__init__()
        self.pa_conv = DepthwiseConv2d(embed_dims, kernel_size)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        return map_to_tokens(self.pa_conv(tokens_to_map(x, hw)))[0].sigmoid()

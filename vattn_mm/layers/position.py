"""Position modules: positional terms computed from the tokens themselves,
so they work at any input size."""
from __future__ import annotations

import torch
from mmengine.registry import MODELS

from .conv import DepthwiseConv2d
from .patch_embed import Size, map_to_tokens, tokens_to_map


@MODELS.register_module()
class ConvPosEnc(DepthwiseConv2d):
    """Convolutional position encoding ``pe(x) = dwconv_k(x)``, added to the
    tokens as ``x + pe(x)`` (conditional position encoding of CPVT,
    arXiv:2102.10882, as DilateFormer applies it before every block).

    Called as ``pe(tokens, (H, W))``; returns the positional term (B, N, C).
    ``where='block'`` (default) adds it before every block of a stage.
    """

    default_where = 'block'

    def __init__(self, embed_dims: int, kernel_size: int = 3):
        super().__init__(embed_dims, kernel_size)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        return map_to_tokens(super().forward(tokens_to_map(x, hw)))[0]

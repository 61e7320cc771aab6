"""CeiT's image-to-tokens stem ("Incorporating Convolution Designs into
Visual Transformers", Yuan et al., arXiv:2103.11816)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .bricks import build_norm
from .builder import register_tokeniser
from .tokens import Size, map_to_tokens, needs_padding, pad_to_multiple


@register_tokeniser
class CeiTImageToTokens(nn.Module):
    """CeiT's I2T: ``MaxPool3x3/2(BN(Conv7x7/2(x)))`` (low-level features at
    stride 4), then non-overlapping ``patch_size`` x ``patch_size`` patches
    of that map projected to ``embed_dims`` (CeiT: patches of 4 of its 32
    channels for a 16-pixel ViT patch), then a norm over the tokens.

    As a pyramid's ``stem`` (stage 0 at stride 4) ``patch_size`` is 1 (a
    1x1 projection).  Sizes: the conv (padding 3) and the pool (padding 1)
    halve with ceiling, so a side ``s`` gives ``ceil(s / 4)``, then
    ``ceil(. / patch_size)`` (the map is zero-padded right / bottom to a
    multiple of the patch).

    Args:
        in_channels: image channels.
        embed_dims: token channels.
        hidden_dims: channels of the conv (CeiT: 32).
        patch_size: side of the patches of the stride-4 map.
        norm_cfg: the norm after the conv (CeiT: BN).
        out_norm_cfg: norm over the tokens (None: none, CeiT's own).
    """

    tokeniser_roles = ('stem', )

    def __init__(self, in_channels: int, embed_dims: int, hidden_dims: int = 32,
                 patch_size: int = 1, norm_cfg: dict = dict(type='BN'),
                 out_norm_cfg: Optional[dict] = dict(type='LN', eps=1e-5)):
        super().__init__()
        if patch_size < 1:
            raise ValueError(f'CeiTImageToTokens: patch_size must be >= 1, got {patch_size}')
        self.conv = nn.Conv2d(in_channels, hidden_dims, 7, 2, 3, bias=False)
        self.bn = build_norm(norm_cfg, hidden_dims)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.patch_size = patch_size
        self.stride = 4 * patch_size
        self.proj = nn.Conv2d(hidden_dims, embed_dims, patch_size, patch_size)
        self.norm = build_norm(out_norm_cfg, embed_dims) if out_norm_cfg \
            else nn.Identity()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        x = self.pool(self.bn(self.conv(x)))
        pad_b = pad_to_multiple(x.shape[2], self.patch_size)
        pad_r = pad_to_multiple(x.shape[3], self.patch_size)
        if needs_padding(pad_b, pad_r):
            x = F.pad(x, (0, pad_r, 0, pad_b))
        x, hw = map_to_tokens(self.proj(x))
        return self.norm(x), hw

"""Position modules: positional terms added to the tokens, computed from the
tokens themselves or resized from a learned table, so they work at any
input size."""
from __future__ import annotations

from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.tracing import is_exporting
from .attention import init_position_bias_
from .builder import register_position
from .conv import DepthwiseConv2d
from .patch_embed import Size, map_to_tokens, tokens_to_map


@register_position
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


@register_position
class AbsolutePosEmbed(nn.Module):
    """Learned absolute position embedding of a token grid (ViT, Dosovitskiy
    et al., arXiv:2010.11929; per stage in PVT, arXiv:2102.12122, and
    Agent-PVT, arXiv:2312.08874), stored as ``pos_embed`` [1, H0 * W0, C] for
    the training grid ``grid_size`` (H0, W0).

    Called as ``pe(tokens, (H, W))``; returns the term for an ``H`` x ``W``
    map: the table itself on the training grid, else the table bilinearly
    resized (``align_corners=False``) to (H, W).  It resizes whenever the grid
    differs, also for a grid with the training token count but another aspect
    ratio (the official Agent-PVT code compares token counts only and then adds
    a mis-laid table, or fails in a later stage).
    ``where='embed'`` (default) adds it once, right after the stage's patch
    embedding.  In a pyramid built from the type alone the training grid is
    that of 224x224 inputs, 56 / 28 / 14 / 7 (:meth:`stage_defaults`).
    """

    default_where = 'embed'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """The token grid of stage ``stage`` (stride ``4 * 2**stage``) for 224x224 inputs."""
        return dict(grid_size=224 // (4 * 2 ** stage))

    def __init__(self, embed_dims: int, grid_size: Union[int, Sequence[int]]):
        super().__init__()
        grid = (grid_size, grid_size) if isinstance(grid_size, int) else tuple(grid_size)
        if len(grid) != 2 or min(grid) < 1:
            raise ValueError(f'AbsolutePosEmbed: grid_size must be a positive int or two '
                             f'positive ints, got {grid_size!r}')
        self.grid_size = grid
        self.pos_embed = nn.Parameter(torch.zeros(1, grid[0] * grid[1], embed_dims))
        init_position_bias_(self.pos_embed)

    def extra_repr(self) -> str:
        return f'grid_size={self.grid_size}'

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        if tuple(hw) == self.grid_size and not is_exporting():   # traced: resize always
            return self.pos_embed   # (a same-size bilinear resize is the identity)
        table = self.pos_embed.reshape(1, *self.grid_size, -1).permute(0, 3, 1, 2)
        table = F.interpolate(table, size=tuple(hw), mode='bilinear', align_corners=False)
        return map_to_tokens(table)[0]

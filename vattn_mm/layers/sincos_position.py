"""Fixed 2-D sine-cosine position embedding (MAE, He et al.,
arXiv:2111.06377; MoCo v3, Chen et al., arXiv:2104.02057)."""
from __future__ import annotations

import torch
from torch import nn

from .builder import register_position
from .tokens import Size

#: which coordinate the first half of the channels encodes
AXIS_ORDERS = ('xy', 'yx')


def sincos_position_table(hw: Size, embed_dims: int, temperature: float = 10000.,
                          axis_order: str = 'xy', device=None) -> torch.Tensor:
    """(1, H * W, C) table of an ``H`` x ``W`` token grid (row-major tokens).

    Each half of the channels encodes one coordinate ``p`` (column ``x``, row
    ``y``) as ``[sin(p * w_i), cos(p * w_i)]`` with ``w_i =
    temperature ** (-i / (C / 4))``, ``i < C / 4``.  ``axis_order='xy'``: the
    column first (MAE's ``get_2d_sincos_pos_embed``, whose ``grid[0]`` is the
    column); ``'yx'``: the row first (MoCo v3's
    ``build_2d_sincos_position_embedding``, whose ``'ij'`` meshgrid makes its
    "w" grid the row index)."""
    h, w = hw
    quarter = embed_dims // 4
    omega = temperature ** (-torch.arange(quarter, dtype=torch.float32, device=device) / quarter)

    def encode(side) -> torch.Tensor:   # (side, C / 2)
        angle = torch.arange(side, dtype=torch.float32, device=device)[:, None] * omega
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    cols = encode(w)[None].expand(h, -1, -1)
    rows = encode(h)[:, None].expand(-1, w, -1)
    halves = (cols, rows) if axis_order == 'xy' else (rows, cols)
    return torch.cat(halves, dim=2).reshape(1, -1, 4 * quarter)


@register_position
class SinCosPosEmbed(nn.Module):
    """Fixed 2-D sine-cosine position embedding, computed for every grid (no
    parameters, nothing to resize): the term :func:`sincos_position_table`
    of the call's ``(H, W)``, added right after the stage's patch embedding
    (``where='embed'``, default).

    Args:
        embed_dims: token channels, a multiple of 4.
        temperature: the frequency base (10000 in MAE and MoCo v3).
        axis_order: ``'xy'`` (MAE, default) or ``'yx'`` (MoCo v3): which
            coordinate the first half of the channels encodes.
    """

    default_where = 'embed'

    def __init__(self, embed_dims: int, temperature: float = 10000., axis_order: str = 'xy'):
        super().__init__()
        if embed_dims % 4:
            raise ValueError(f'SinCosPosEmbed: embed_dims must be a multiple of 4 (sin and cos '
                             f'of two coordinates), got {embed_dims}')
        if axis_order not in AXIS_ORDERS:
            raise ValueError(f'SinCosPosEmbed: axis_order={axis_order!r}, expected one of '
                             f'{AXIS_ORDERS}')
        self.embed_dims = embed_dims
        self.temperature = temperature
        self.axis_order = axis_order

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, axis_order={self.axis_order!r}'

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        table = sincos_position_table(hw, self.embed_dims, self.temperature, self.axis_order,
                                      x.device)
        return table.to(x.dtype)

"""Shifted-window attention (Swin Transformer, "Swin Transformer: Hierarchical
Vision Transformer using Shifted Windows", Liu et al., arXiv:2103.14030), with
Swin v2's continuous position bias as an option (arXiv:2111.09883)."""
from __future__ import annotations

import math
from typing import Mapping, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import is_exporting
from .attention import attention_width
from .builder import register_mixer
from .tokens import Size, init_position_bias_, needs_padding, pad_to_multiple

#: logit added between tokens of different regions of the shifted map (Swin's value, not -inf)
REGION_MASK_VALUE = -100.0
#: how the relative position bias is made: a learned table (Swin), the CPB MLP (Swin v2), or none
POSITION_BIASES = ('table', 'cpb', 'none')
#: Swin v2: the largest bias the CPB gives (``16 * sigmoid``) and the coordinate range +-8
CPB_BIAS_RANGE = 16.
CPB_COORD_RANGE = 8.


def relative_position_index(window_size: int) -> torch.Tensor:
    """(M*M, M*M) index into the (2M-1)^2 bias table for query i, key j of an
    M x M window (tokens row-major): ``(dy + M - 1) * (2M - 1) + dx + M - 1``
    with ``(dy, dx)`` = position of the query minus that of the key."""
    m = window_size
    coords = torch.stack(torch.meshgrid(torch.arange(m), torch.arange(m), indexing='ij')).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :] + (m - 1)  # (2, M*M, M*M), in [0, 2M-2]
    return rel[0] * (2 * m - 1) + rel[1]


def log_spaced_relative_coords(window_size: int, pretrained_window_size: int = 0
                                ) -> torch.Tensor:
    """((2M-1)^2, 2) Swin v2 CPB inputs: the relative offsets ``(dy, dx)`` in
    ``[-(M-1), M-1]`` (rows ordered as :func:`relative_position_index`
    reads them), divided by ``P - 1`` for ``P`` = the pre-training window
    (``pretrained_window_size``, or ``M`` when 0), scaled to +-8, then
    ``sign(t) * log2(|t| + 1) / log2(8)``."""
    m = window_size
    span = (pretrained_window_size if pretrained_window_size > 0 else m) - 1
    offsets = torch.arange(-(m - 1), m, dtype=torch.float32)
    coords = torch.stack(torch.meshgrid(offsets, offsets, indexing='ij'), dim=-1)
    coords = coords / span * CPB_COORD_RANGE
    coords = torch.sign(coords) * torch.log2(coords.abs() + 1.0) / math.log2(CPB_COORD_RANGE)
    return coords.reshape(-1, 2)


def shifted_window_mask(hw: Size, window_size: int, shift_size: int,
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """(windows, M*M, M*M) additive mask of the cyclically shifted ``hw`` map
    (sides multiples of the window): 0 between tokens of the same region, -100
    between regions that the roll brought together.  The regions along a side
    are ``[0, side - M)``, ``[side - M, side - S)``, ``[side - S, side)``
    (tensor comparisons: valid for traced sizes too)."""
    h, w = hw
    m, s = window_size, shift_size

    def regions(side) -> torch.Tensor:
        pos = torch.arange(side, device=device)
        return (pos >= side - m).long() + (pos >= side - s).long()

    label = regions(h)[:, None] * 3 + regions(w)[None, :]
    windows = label.view(h // m, m, w // m, m).transpose(1, 2).reshape(-1, m * m)
    different = windows[:, :, None] != windows[:, None, :]
    return different.float() * REGION_MASK_VALUE


@register_mixer
class ShiftedWindowAttention(nn.Module):
    """Multi-head self-attention inside non-overlapping ``window_size`` x
    ``window_size`` windows (W-MSA) with a learned relative position bias;
    with ``shift_size > 0`` the map is first rolled by ``-shift_size`` on
    both axes and tokens from regions that were not adjacent before the roll
    are masked apart (-100 added to their logits), then rolled back (SW-MSA).

    Any map size: the map is zero-padded at the bottom / right to a multiple
    of the window (as Swin's detection / segmentation backbones do, padded
    tokens are not masked) and the output cropped back; the region mask is
    built for the padded size and cached per size.  Cost:
    ``O(H * W * M^2 * C)`` for M x M windows, linear in the number of tokens.

    In a pyramid Swin alternates W-MSA and SW-MSA: :meth:`block_defaults`
    gives ``shift_size=0`` to even and ``window_size // 2`` to odd blocks of a
    stage; a ``shift_size`` in the config applies to every block.

    Args:
        embed_dims: token channels.
        num_heads: heads; ``embed_dims`` must be divisible by it.
        window_size: window side ``M``.
        shift_size: cyclic shift ``S`` in ``[0, M)``; ``'half'`` = ``M // 2``.
        qkv_bias: bias of the query / key / value projection.
        qk_scale: logit scale; None: ``head_dim ** -0.5``.
        attn_drop: dropout on the attention weights (training only).
        attn_dims: width of queries, keys and values (default ``embed_dims``).
        position_bias: ``'table'`` (Swin: a learned ``[(2M-1)^2, heads]``
            ``relative_position_bias_table``) or ``'cpb'`` (Swin v2's
            continuous position bias: ``16 * sigmoid(cpb_mlp(coords))`` of the
            log-spaced offsets :func:`log_spaced_relative_coords`,
            ``cpb_mlp`` = Linear(2, 512) + ReLU + Linear(512, heads, no bias),
            the official keys ``cpb_mlp.0/2``).  Only the bias is Swin v2's:
            the attention stays Swin v1's scaled dot product (no cosine
            attention, no ``logit_scale``).
        pretrained_window_size: CPB only: the window of pre-training, whose
            span normalises the offsets (0: this window), so a bias learned at
            one window transfers to another.
        cpb_hidden_dims: CPB only: the MLP's hidden width (Swin v2: 512).
    """

    scaling = 'linear'
    inner_width = 'attn_dims'
    #: the position terms this mixer holds, run by the position suite
    position_variants = {'swin_relative_bias': {}, 'swin_v2_cpb': dict(position_bias='cpb')}

    @staticmethod
    def block_defaults(block: int) -> dict:
        """Swin's alternation: W-MSA in even blocks, SW-MSA (half-window shift) in odd ones."""
        return dict(shift_size='half' if block % 2 else 0)

    def __init__(self, embed_dims: int, num_heads: int, window_size: int = 7,
                 shift_size: Union[int, str] = 0, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.,
                 attn_dims: Optional[int] = None, position_bias: str = 'table',
                 pretrained_window_size: int = 0, cpb_hidden_dims: int = 512):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if position_bias not in POSITION_BIASES:
            raise ValueError(f'ShiftedWindowAttention: position_bias={position_bias!r}, expected '
                             f'one of {POSITION_BIASES}')
        if position_bias == 'cpb' and (pretrained_window_size or window_size) < 2:
            raise ValueError(f'ShiftedWindowAttention: the CPB normalises offsets by the window '
                             f'span, which needs a window of at least 2, got window_size='
                             f'{window_size}, pretrained_window_size={pretrained_window_size}')
        if window_size < 1:
            raise ValueError(f'ShiftedWindowAttention: window_size must be >= 1, got {window_size}')
        if shift_size == 'half':
            shift_size = window_size // 2
        if not isinstance(shift_size, int) or not 0 <= shift_size < window_size:
            raise ValueError(f'ShiftedWindowAttention: shift_size must be an int in [0, '
                             f'window_size={window_size}) or "half", got {shift_size!r}')
        self.num_heads = num_heads
        self.window_size = window_size
        self.shift_size = shift_size
        self.attn_dims = width
        self.scale = qk_scale or (width // num_heads) ** -0.5
        self.attn_drop = attn_drop
        self.position_bias = position_bias
        if position_bias == 'table':
            self.relative_position_bias_table = nn.Parameter(
                torch.zeros((2 * window_size - 1) ** 2, num_heads))
            init_position_bias_(self.relative_position_bias_table)
        elif position_bias == 'cpb':
            self.pretrained_window_size = pretrained_window_size
            self.cpb_mlp = nn.Sequential(nn.Linear(2, cpb_hidden_dims), nn.ReLU(inplace=True),
                                         nn.Linear(cpb_hidden_dims, num_heads, bias=False))
            self.register_buffer('relative_coords_table', log_spaced_relative_coords(
                window_size, pretrained_window_size), persistent=False)
        self.register_buffer('relative_position_index', relative_position_index(window_size),
                             persistent=False)
        self.qkv = nn.Linear(embed_dims, 3 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self._masks: dict = {}  # (Hp, Wp, device) -> region mask of the shifted padded map

    def extra_repr(self) -> str:
        return (f'heads={self.num_heads}, window_size={self.window_size}, '
                f'shift_size={self.shift_size}, position_bias={self.position_bias!r}')

    # ------------------------------------------------------------ weights
    #: official keys that are recomputed here: WindowAttention's index buffer,
    #: SwinTransformerBlock's mask buffer and Swin v2's CPB inputs
    official_buffers = ('relative_position_index', 'attn_mask', 'relative_coords_table')

    @classmethod
    def convert_official_state_dict(cls, state_dict: Mapping[str, torch.Tensor]) -> dict:
        """Official Swin ``WindowAttention`` state dict (the ``attn.`` part of a
        ``SwinTransformerBlock``) -> ours: the same keys (``qkv``, ``proj``,
        ``relative_position_bias_table``; Swin v2's ``cpb_mlp.*``) with the
        recomputed buffers dropped."""
        return {k: v for k, v in state_dict.items()
                if k.rsplit('.', 1)[-1] not in cls.official_buffers}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # official checkpoints carry the recomputed buffers: accept and drop them
        for name in self.official_buffers:
            state_dict.pop(prefix + name, None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------ forward
    def region_mask(self, hw: Size, device: torch.device) -> torch.Tensor:
        """Cached (windows, 1, M*M, M*M) mask of the shifted padded map ``hw``."""
        if is_exporting():   # traced sizes: built in the graph
            return shifted_window_mask(hw, self.window_size, self.shift_size, device).unsqueeze(1)
        key = (*hw, device)
        if key not in self._masks:
            self._masks[key] = shifted_window_mask(
                hw, self.window_size, self.shift_size).unsqueeze(1).to(device)
        return self._masks[key]

    def bias_table(self) -> Optional[torch.Tensor]:
        """((2M-1)^2, heads) bias of every relative offset: the learned table,
        ``16 * sigmoid`` of the CPB MLP of the log-spaced offsets, or None."""
        if self.position_bias == 'table':
            return self.relative_position_bias_table
        if self.position_bias == 'cpb':
            return CPB_BIAS_RANGE * torch.sigmoid(self.cpb_mlp(self.relative_coords_table))
        return None

    @torch.no_grad()
    def resize_window(self, window_size: int) -> None:
        """Move the trained attention to ``window_size`` windows, as Swin and
        Swin v2 move a model to larger windows: the table is resized
        bicubically from (2M-1)^2 to (2M'-1)^2 offsets (official Swin's
        ``load_pretrained``); the CPB is evaluated at the new offsets,
        normalised by the trained window (Swin v2's
        ``pretrained_window_size``).  A shift scales with the window."""
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f'ShiftedWindowAttention: window_size must be an int >= 1, '
                             f'got {window_size!r}')
        old, device = self.window_size, self.relative_position_index.device
        if self.position_bias == 'table':
            table = self.relative_position_bias_table
            grid = table.t().reshape(1, self.num_heads, 2 * old - 1, 2 * old - 1)
            resized = F.interpolate(grid, size=(2 * window_size - 1,) * 2, mode='bicubic',
                                    align_corners=False)
            self.relative_position_bias_table = nn.Parameter(
                resized.reshape(self.num_heads, -1).t().contiguous(),
                requires_grad=table.requires_grad)
        elif self.position_bias == 'cpb':
            self.pretrained_window_size = self.pretrained_window_size or old
            self.relative_coords_table = log_spaced_relative_coords(
                window_size, self.pretrained_window_size).to(device)
        self.shift_size = self.shift_size * window_size // old
        self.window_size = window_size
        self.relative_position_index = relative_position_index(window_size).to(device)
        self._masks.clear()

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, c = x.shape
        h, w = hw
        m, s = self.window_size, self.shift_size
        x = x.reshape(b, h, w, c)
        pad_b, pad_r = pad_to_multiple(h, m), pad_to_multiple(w, m)
        if needs_padding(pad_b, pad_r):
            x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        hp, wp = h + pad_b, w + pad_r
        if s:
            x = torch.roll(x, (-s, -s), dims=(1, 2))
        hg, wg = hp // m, wp // m
        # (B, Hp, Wp, C) -> (B * windows, M*M, C), windows and their tokens row-major
        windows = x.view(b, hg, m, wg, m, c).transpose(2, 3).reshape(b * hg * wg, m * m, c)
        a = self.attn_dims
        q, k, v = self.qkv(windows).view(-1, m * m, 3, self.num_heads, a // self.num_heads) \
            .permute(2, 0, 3, 1, 4)  # each (B * windows, heads, M*M, d)
        table = self.bias_table()
        bias = None if table is None else table[self.relative_position_index].permute(2, 0, 1)
        if s:
            # (windows, heads, M*M, M*M) repeated over the batch (windows are batch-major)
            mask = self.region_mask((hp, wp), x.device)
            bias = (mask.to(q.dtype) if bias is None else bias + mask.to(bias.dtype)).repeat(
                b, 1, 1, 1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None if bias is None else bias.to(q.dtype), scale=self.scale,
            dropout_p=self.attn_drop if self.training else 0.)
        # (B * windows, heads, M*M, d) -> (B, Hp, Wp, A)
        out = out.transpose(1, 2).reshape(b, hg, wg, m, m, a).transpose(2, 3).reshape(b, hp, wp, a)
        if s:
            out = torch.roll(out, (s, s), dims=(1, 2))
        out = self.proj(out[:, :h, :w].reshape(b, n, a))
        return out

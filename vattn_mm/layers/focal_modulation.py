"""Focal modulation (FocalNet: Focal Modulation Networks, Yang et al.,
NeurIPS 2022, arXiv:2203.11926)."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from .. import ops
from ..ops import DepthwiseConv2d
from .builder import register_mixer
from .tokens import Size, map_to_tokens, tokens_to_map


@register_mixer
class FocalModulation(nn.Module):
    """Focal modulation: ``proj(q * h(sum_l gate_l * ctx_l))``.

    One linear ``f`` gives the query ``q``, the context ``ctx`` and
    ``L + 1`` gates (raw, no sigmoid).  The context passes ``L`` stacked
    bias-free depthwise convolutions with GELU (kernel ``focal_window +
    focal_factor * l``, zero padding ``k // 2``); each level's output, plus
    the GELU of its global average (the ``L + 1``-th level), is weighted by
    its gate and summed.  The sum is mixed by the 1x1 conv ``h`` into the
    modulator that multiplies ``q``; ``proj`` maps the result back.

    Args:
        embed_dims: token channels ``C``.
        focal_level: number of depthwise context levels ``L`` (FocalNet-srf: 2).
        focal_window: kernel size of the first level (odd; ImageNet FocalNet: 3).
        focal_factor: kernel growth per level (even, so kernels stay odd).
        normalize_modulator: divide the gated sum by ``L + 1``
            (FocalNet-L fl4).
        use_postln_in_modulation: LayerNorm (eps 1e-5) before ``proj``
            (FocalNet-H).
        proj_drop: dropout after ``proj``.
        modulation_dims: channels ``A`` of the query, the context and the
            modulator (default ``C``): ``f`` maps ``C`` to ``2A + L + 1``,
            ``proj`` maps ``A`` back to ``C``.

    Cost: linear in the number of tokens (depthwise convs, no attention).
    In training the levels' activations are not kept for the backward (fast
    path ``focal_recompute``, :mod:`vattn_mm.ops.focal`).
    """

    scaling = 'linear'
    inner_width = 'modulation_dims'

    def elementwise_macs(self, x_shape: Sequence[int]) -> int:
        """Per token and modulation channel: one gate product per focal
        level, one for the global context and the ``q * modulator`` product
        (official ``flops()``)."""
        b, n, _ = x_shape
        return b * n * self.modulation_dims * (self.focal_level + 2)

    def __init__(self, embed_dims: int, focal_level: int = 2, focal_window: int = 3,
                 focal_factor: int = 2, normalize_modulator: bool = False,
                 use_postln_in_modulation: bool = False, proj_drop: float = 0.,
                 modulation_dims: Optional[int] = None):
        super().__init__()
        width = embed_dims if modulation_dims is None else modulation_dims
        if not isinstance(width, int) or width < 1:
            raise ValueError(f'FocalModulation: modulation_dims must be a positive int, '
                             f'got {modulation_dims!r}')
        if focal_level < 1:
            raise ValueError(f'FocalModulation: focal_level must be >= 1, got {focal_level}')
        kernels = [focal_window + focal_factor * level for level in range(focal_level)]
        if any(k < 1 or k % 2 == 0 for k in kernels):
            raise ValueError(f'FocalModulation: focal kernels {kernels} (focal_window '
                             f'{focal_window} + {focal_factor} * level) must be odd and '
                             'positive so that "same" padding keeps the map size')
        self.focal_level = focal_level
        self.normalize_modulator = normalize_modulator
        self.modulation_dims = width
        self.f = nn.Linear(embed_dims, 2 * width + focal_level + 1)
        self.focal_layers = nn.ModuleList(
            DepthwiseConv2d(width, k, bias=False)
            for k in kernels)
        self.act = nn.GELU()
        self.h = nn.Conv2d(width, width, 1)
        self.ln = nn.LayerNorm(width) if use_postln_in_modulation else nn.Identity()
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.focal_recompute = ops.switch('focal_recompute')

    @property
    def kernel_sizes(self) -> list[int]:
        return [conv.kernel_size[0] for conv in self.focal_layers]

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        c = self.modulation_dims
        q, ctx, gates = tokens_to_map(self.f(x), hw).split(
            (c, c, self.focal_level + 1), dim=1)
        ctx_all = ops.focal_context(self, ctx, gates)
        out, _ = map_to_tokens(q * self.h(ctx_all))
        return self.proj_drop(self.proj(self.ln(out)))

    def context(self, ctx: torch.Tensor, gates: torch.Tensor,
                levels: Optional[list] = None) -> torch.Tensor:
        """The gated sum of the context levels; ``levels`` (a list) also
        receives each depthwise convolution's output (before ``act``), as
        :class:`~vattn_mm.ops.focal.FocalContext` keeps them."""
        ctx_all = None
        for level, conv in enumerate(self.focal_layers):
            if levels is None:
                ctx = conv.forward_act(ctx, self.act)
            else:
                levels.append(conv(ctx))
                ctx = self.act(levels[-1])
            gate = gates[:, level:level + 1]
            ctx_all = ctx * gate if ctx_all is None else torch.addcmul(ctx_all, ctx, gate)
        ctx_global = self.act(ctx.mean((2, 3), keepdim=True))
        ctx_all = torch.addcmul(ctx_all, ctx_global, gates[:, self.focal_level:])
        if self.normalize_modulator:
            ctx_all = ctx_all / (self.focal_level + 1)
        return ctx_all


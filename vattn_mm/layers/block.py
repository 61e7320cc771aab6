"""Pre-norm residual block shared by the token-based backbones."""
from __future__ import annotations

from typing import Optional

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from torch import nn

from .. import ops
from .patch_embed import Size


class LayerScale(nn.Module):
    """Learnable per-channel residual scaling (CaiT, arXiv:2103.17239)."""

    def __init__(self, dims: int, init_value: float):
        super().__init__()
        self.weight = nn.Parameter(torch.full((dims, ), init_value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class TokenBlock(nn.Module):
    """``x + drop_path(ls1(mixer(norm1(x)))) -> x + drop_path(ls2(ffn(norm2(x))))``.

    ``position`` (optional, stored as ``pos_embed``): a position module
    applied first (:func:`apply_position`: ``x + pos_embed(x)``,
    DilateFormer's per-block CPE).

    ``mixer`` and ``ffn`` are called as ``module(tokens, (H, W))``; extra
    positional arguments of the block go to the mixer (P2T's pooling convs).
    A block without a token mixer (``mixer=None``) is just the FFN half, as in
    the early LITv2 stages.  ``layer_scale`` enables :class:`LayerScale`;
    ``post_norm`` normalises each branch's output instead of its input
    (``x + drop_path(ls1(norm1(mixer(x))))``, FocalNet-L/XL/H ``use_postln``).

    ``inplace=True`` (only without autograd, for an input nobody else reads
    afterwards, as :meth:`PyramidBackbone.run_stage` passes it in inference)
    adds the residuals into ``x`` itself: one map less alive per block.

    ``norm_cfg=None``: no norms, ``x + mixer(x) -> x + ffn(x)`` (EfficientViT,
    whose mixer and FFN end in their own BatchNorm).
    """

    def __init__(self, embed_dims: int, mixer: Optional[nn.Module], ffn: nn.Module,
                 drop_path: float = 0., norm_cfg: Optional[dict] = dict(type='LN', eps=1e-6),
                 layer_scale: Optional[float] = None, post_norm: bool = False,
                 position: Optional[nn.Module] = None):
        super().__init__()
        self.post_norm = post_norm
        if position is not None:
            self.pos_embed = position
        self.has_position = position is not None
        def norm() -> nn.Module:
            return build_norm_layer(norm_cfg, embed_dims)[1] if norm_cfg else nn.Identity()

        if mixer is not None:
            self.norm1 = norm()
            self.attn = mixer
        self.norm2 = norm()
        self.ffn = ffn
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        scaled = layer_scale is not None
        self.ls1 = LayerScale(embed_dims, layer_scale) if scaled and mixer is not None \
            else nn.Identity()
        self.ls2 = LayerScale(embed_dims, layer_scale) if scaled else nn.Identity()
        self.has_mixer = mixer is not None
        self.recompute_norm = ops.switch('recompute_norm')

    def forward(self, x: torch.Tensor, hw: Size, *mixer_args, inplace: bool = False
                ) -> torch.Tensor:
        add = residual_add(inplace)
        if self.has_position:
            x = apply_position(self.pos_embed, x, hw, inplace)
        if self.has_mixer:
            x = add(x, self.drop_path(self.ls1(
                self._branch(self.attn, self.norm1, x, hw, *mixer_args))))
        return add(x, self.drop_path(self.ls2(self._branch(self.ffn, self.norm2, x, hw))))

    def _branch(self, module: nn.Module, norm: nn.Module, x: torch.Tensor,
                hw: Size, *args) -> torch.Tensor:
        if self.post_norm:
            return norm(module(x, hw, *args))
        # training: y is not stored for the backward (fast path recompute_norm)
        with ops.norm_recomputed(x, norm, self.recompute_norm) as y:
            return module(y, hw, *args)


def residual_add(inplace: bool):
    """``x + y``, or ``x.add_(y)`` (in place, refused under autograd)."""
    if not inplace:
        return torch.add
    if torch.is_grad_enabled():
        raise RuntimeError('in-place residuals are for inference (torch.no_grad) only')
    return torch.Tensor.add_


def apply_position(position: nn.Module, x: torch.Tensor, hw: Size,
                   inplace: bool = False) -> torch.Tensor:
    """The tokens ``x`` with a position module's output: ``x + position(x)``,
    or ``x * position(x)`` for a gate (``combine = 'multiply'``); in place
    with ``inplace`` (inference only, as :func:`residual_add`)."""
    term = position(x, hw)
    if getattr(position, 'combine', 'add') == 'multiply':
        if not inplace:
            return x * term
        if torch.is_grad_enabled():
            raise RuntimeError('in-place position gates are for inference (torch.no_grad) only')
        return x.mul_(term)
    return residual_add(inplace)(x, term)

"""Patch embeddings and convolutional stems that turn an image (or a feature
map) into a token sequence plus its spatial size."""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from mmcv.cnn import build_activation_layer, build_norm_layer
from torch import nn

from .builder import register_tokeniser
from .conv import TokenMapConv2d
from .export_ops import needs_padding, pad_to_multiple

Size = tuple[int, int]


def tokens_to_map(x: torch.Tensor, hw: Size) -> torch.Tensor:
    """(B, N, C) tokens -> (B, C, H, W) map; a view of contiguous tokens with
    channels-last strides, the batch stride included (``N * C`` also for
    B = 1, where PyTorch's layout heuristic would otherwise take the map for
    NCHW and copy it in pooling and normalisation kernels)."""
    return x.reshape(x.shape[0], *hw, x.shape[2]).permute(0, 3, 1, 2)


def map_to_tokens(x: torch.Tensor) -> tuple[torch.Tensor, Size]:
    """(B, C, H, W) map -> (B, N, C) tokens and (H, W)."""
    return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


@register_tokeniser
class OverlapPatchEmbed(nn.Module):
    """Strided convolution with overlapping windows, then a norm over channels
    (PVTv2, Wang et al. 2022, arXiv:2106.13797).  The kernel defaults to
    ``2 * stride - 1`` (PVTv2: 7x7 stride 4, then 3x3 stride 2).

    The output size is read from the convolution, so any input size works:
    ``H_out = floor((H + 2 * padding - kernel_size) / stride) + 1``.
    ``pad_to_multiple`` first zero-pads the input right / bottom to a multiple
    of that number (the Swin-style dense embeddings of FocalNet and LITv2), so
    a side ``s`` then gives ``ceil(s / stride)`` tokens.
    """

    tokeniser_roles = ('stem', 'patch_embed')

    def __init__(self, in_channels: int, embed_dims: int, kernel_size: Optional[int] = None,
                 stride: int = 4, padding: Optional[int] = None,
                 norm_cfg: Optional[dict] = dict(type='LN', eps=1e-5),
                 pad_to_multiple: Optional[int] = None):
        super().__init__()
        kernel_size = 2 * stride - 1 if kernel_size is None else kernel_size
        padding = kernel_size // 2 if padding is None else padding
        self.stride = stride
        self.pad_to_multiple = pad_to_multiple
        self.proj = TokenMapConv2d(in_channels, embed_dims, kernel_size, stride, padding)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1] if norm_cfg else nn.Identity()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        if self.pad_to_multiple:
            h, w = x.shape[-2:]
            pad_h = pad_to_multiple(h, self.pad_to_multiple)
            pad_w = pad_to_multiple(w, self.pad_to_multiple)
            if needs_padding(pad_h, pad_w):
                x = F.pad(x, (0, pad_w, 0, pad_h))
        x, hw = map_to_tokens(self.proj(x))
        return self.norm(x), hw


@register_tokeniser
class NonOverlapPatchEmbed(OverlapPatchEmbed):
    """Non-overlapping ``stride`` x ``stride`` patches (ViT / Swin): the input
    is zero-padded right / bottom to a multiple of ``stride``, so a side
    ``s`` gives ``ceil(s / stride)`` tokens; then a norm over channels."""

    def __init__(self, in_channels: int, embed_dims: int, stride: int = 4,
                 norm_cfg: Optional[dict] = dict(type='LN', eps=1e-5)):
        super().__init__(in_channels, embed_dims, stride, stride, 0, norm_cfg,
                         pad_to_multiple=stride)


@register_tokeniser
class ConvStem(nn.Module):
    """Stack of 3x3 conv-norm-act layers followed by a 1x1 projection
    ("Early Convolutions Help Transformers See Better", Xiao et al. 2021,
    arXiv:2106.14881).  Drop-in replacement for a first-stage patch embedding.
    With ``out_norm_cfg=None`` it is ViT_c's stem (pycls ``ViTStemConv``:
    bias-free 3x3 convs with padding 1 + BN + ReLU, then a 1x1 conv with
    bias); ViT_c itself uses four stride-2 layers (stride 16), a pyramid's
    stem two (stride 4).

    Args:
        in_channels: image channels.
        embed_dims: output channels.
        hidden_dims: channels of the 3x3 layers.
        strides: stride of each 3x3 layer (their product is the stem stride).
        norm_cfg / act_cfg: norm and activation after each 3x3 conv.
        out_norm_cfg: norm over the output tokens (None for none).
    """

    tokeniser_roles = ('stem', )

    def __init__(self, in_channels: int, embed_dims: int,
                 hidden_dims: Sequence[int] = (48, 96),
                 strides: Sequence[int] = (2, 2),
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU'),
                 out_norm_cfg: Optional[dict] = dict(type='LN', eps=1e-5)):
        super().__init__()
        if len(hidden_dims) != len(strides):
            raise ValueError(f'ConvStem: {len(hidden_dims)} hidden_dims but '
                             f'{len(strides)} strides')
        layers, channels = [], in_channels
        for dims, stride in zip(hidden_dims, strides):
            layers += [nn.Conv2d(channels, dims, 3, stride, 1, bias=False),
                       build_norm_layer(norm_cfg, dims)[1],
                       build_activation_layer(act_cfg)]
            channels = dims
        layers.append(nn.Conv2d(channels, embed_dims, 1))
        self.stride = math.prod(strides)
        self.convs = nn.Sequential(*layers)
        self.norm = build_norm_layer(out_norm_cfg, embed_dims)[1] if out_norm_cfg else nn.Identity()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        x, hw = map_to_tokens(self.convs(x))
        return self.norm(x), hw

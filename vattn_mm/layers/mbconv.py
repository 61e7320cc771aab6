"""Convolution blocks of the mobile networks: conv-norm-activation, the
depthwise-separable conv and the inverted-residual "MBConv" (MobileNetV2,
Sandler et al., CVPR 2018, arXiv:1801.04381), with the state-dict keys of
EfficientViT's ``ConvLayer`` / ``DSConv`` / ``MBConv`` (Cai et al., ICCV
2023, arXiv:2205.14756).

All convolutions are :class:`~vattn_mm.layers.TokenMapConv2d`: on maps viewed
from (B, N, C) tokens (or any channels-last map) they stay channels-last, so
a block between token stages makes no layout copy.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ..ops import TokenMapConv2d
from .bricks import build_activation, build_norm
from .builder import register_layer
from .tokens import Size, map_to_tokens, tokens_to_map

Cfg = Optional[Mapping[str, Any]]
HSWISH = dict(type='HSwish')
BN = dict(type='BN', eps=1e-5)


def per_layer(value: Any, count: int, name: str) -> tuple:
    """One value for each of ``count`` layers: a list / tuple of ``count``
    entries, or one value for all (official ``val2tuple``)."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f'{name}: expected one value or {count}, got {value!r}')
        return tuple(value)
    return (value, ) * count


class ConvNormAct(nn.Module):
    """``k x k`` conv ("same" padding), optional norm, optional activation;
    the keys of EfficientViT's ``ConvLayer`` (``conv``, ``norm``).  Without
    a norm, conv + activation run as one fused call in CPU inference
    (:meth:`TokenMapConv2d.forward_act`)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1,
                 stride: int = 1, groups: int = 1, bias: bool = False,
                 norm_cfg: Cfg = None, act_cfg: Cfg = None):
        super().__init__()
        self.conv = TokenMapConv2d(in_channels, out_channels, kernel_size, stride,
                                   kernel_size // 2, groups=groups, bias=bias)
        self.norm = build_norm(dict(norm_cfg), out_channels) if norm_cfg else None
        self.act = build_activation(dict(act_cfg)) if act_cfg else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm is None:
            return self.conv(x) if self.act is None else self.conv.forward_act(x, self.act)
        x = self.norm(self.conv(x))
        return x if self.act is None else self.act(x)


class DSConv(nn.Module):
    """Depthwise ``k x k`` conv then pointwise conv, each with its own bias /
    norm / activation (``depth_conv``, ``point_conv``); ``residual`` adds the
    input (EfficientViT's stem blocks).  Works on maps."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: int = 1, use_bias: Union[bool, Sequence[bool]] = False,
                 norm_cfg: Union[Cfg, Sequence[Cfg]] = BN,
                 act_cfg: Union[Cfg, Sequence[Cfg]] = (HSWISH, None),
                 residual: bool = False):
        super().__init__()
        bias = per_layer(use_bias, 2, 'DSConv use_bias')
        norm = per_layer(norm_cfg, 2, 'DSConv norm_cfg')
        act = per_layer(act_cfg, 2, 'DSConv act_cfg')
        if residual and (stride != 1 or in_channels != out_channels):
            raise ValueError(f'DSConv: a residual block keeps its size, got stride {stride}, '
                             f'{in_channels} -> {out_channels} channels')
        self.residual = residual
        self.depth_conv = ConvNormAct(in_channels, in_channels, kernel_size, stride,
                                      in_channels, bias[0], norm[0], act[0])
        self.point_conv = ConvNormAct(in_channels, out_channels, 1, 1, 1, bias[1], norm[1],
                                      act[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.point_conv(self.depth_conv(x))
        return x + out if self.residual else out


@register_layer
class MBConv(nn.Module):
    """Inverted residual block without its shortcut: 1x1 expansion to
    ``hidden_dims``, depthwise ``k x k`` (stride ``stride``), 1x1 projection
    (``inverted_conv``, ``depth_conv``, ``point_conv``), each with its own
    bias / norm / activation.

    Called like an FFN, ``mbconv(tokens, (H, W))`` -> tokens (stride 1), or on
    a map with :meth:`forward_map` (any stride; the map sides halve with
    ceiling at stride 2).

    Args:
        embed_dims: input channels.
        hidden_dims: expanded channels (EfficientViT: ``expand_ratio`` x input).
        out_dims: output channels (default ``embed_dims``).
        stride: of the depthwise conv.
        kernel_size: of the depthwise conv.
        use_bias, norm_cfg, act_cfg: one value or three (one per conv);
            EfficientViT's defaults: no biases, BN after each, Hardswish
            after the first two.
    """

    def __init__(self, embed_dims: int, hidden_dims: int, out_dims: Optional[int] = None,
                 stride: int = 1, kernel_size: int = 3,
                 use_bias: Union[bool, Sequence[bool]] = False,
                 norm_cfg: Union[Cfg, Sequence[Cfg]] = BN,
                 act_cfg: Union[Cfg, Sequence[Cfg]] = (HSWISH, HSWISH, None)):
        super().__init__()
        bias = per_layer(use_bias, 3, 'MBConv use_bias')
        norm = per_layer(norm_cfg, 3, 'MBConv norm_cfg')
        act = per_layer(act_cfg, 3, 'MBConv act_cfg')
        out_dims = embed_dims if out_dims is None else out_dims
        self.stride = stride
        self.inverted_conv = ConvNormAct(embed_dims, hidden_dims, 1, 1, 1, bias[0], norm[0],
                                         act[0])
        self.depth_conv = ConvNormAct(hidden_dims, hidden_dims, kernel_size, stride,
                                      hidden_dims, bias[1], norm[1], act[1])
        self.point_conv = ConvNormAct(hidden_dims, out_dims, 1, 1, 1, bias[2], norm[2], act[2])

    def forward_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.point_conv(self.depth_conv(self.inverted_conv(x)))

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        if self.stride != 1:
            raise RuntimeError('MBConv: a strided block changes the map size; call '
                               'forward_map on the map instead')
        return map_to_tokens(self.forward_map(tokens_to_map(x, hw)))[0]


class EfficientViTEmbed(nn.Module):
    """A stage's entry: the stride-2 MBConv that starts official stage
    ``i + 1`` (``downsample``), for the first stage preceded by the input
    stem (``input_stem``: 3x3 stride-2 conv + BN + act, then residual
    DSConvs).  Map in, (B, N, C) tokens and their (H, W) out."""

    def __init__(self, downsample: MBConv, input_stem: Optional[nn.Sequential] = None):
        super().__init__()
        if input_stem is not None:
            self.input_stem = input_stem
        self.has_stem = input_stem is not None
        self.downsample = downsample
        self.stride = downsample.stride * (2 if self.has_stem else 1)

    def forward_stem(self, x: torch.Tensor) -> torch.Tensor:
        """The image -> the stride-2 stem map (official ``stage0``), kept
        channels-last so the following convolutions make no layout copy."""
        return self.input_stem(x.contiguous(memory_format=torch.channels_last))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        if self.has_stem:
            x = self.forward_stem(x)
        return map_to_tokens(self.downsample.forward_map(x))


@register_layer
class EfficientViTClsNeck(nn.Module):
    """EfficientViT's ImageNet classifier up to its last linear layer, as an
    mmpretrain neck (official ``ClsHead`` without ``op_list.3``): 1x1 conv +
    norm + act on the last map, global average pooling, linear (no bias) +
    LayerNorm + act.  The final linear layer is mmpretrain's
    ``LinearClsHead`` on the ``widths[1]``-wide output.

    Takes a map or a tuple of maps (the last one is used, as mmpretrain's
    ``GlobalAveragePooling`` does) and returns the same kind.
    """

    def __init__(self, in_channels: int, widths: Sequence[int], norm_cfg: Cfg = BN,
                 act_cfg: Cfg = HSWISH, ln_eps: float = 1e-5):
        super().__init__()
        if len(widths) != 2:
            raise ValueError(f'EfficientViTClsNeck: widths needs 2 entries (conv, linear), '
                             f'got {widths!r}')
        self.out_channels = widths[1]
        self.conv = ConvNormAct(in_channels, widths[0], norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.fc = nn.Linear(widths[0], widths[1], bias=False)
        self.norm = nn.LayerNorm(widths[1], eps=ln_eps)
        self.act = build_activation(dict(act_cfg))

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.fc(self.conv(x).mean((2, 3)))))

    def forward(self, inputs: Union[torch.Tensor, Sequence[torch.Tensor]]):
        if isinstance(inputs, torch.Tensor):
            return self.pool(inputs)
        return (self.pool(inputs[-1]), )

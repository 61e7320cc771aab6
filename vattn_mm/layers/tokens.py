"""Tokens: the views between token sequences and maps, the tokenisers that
turn an image (or a feature map) into tokens plus their spatial size (patch
embeddings, convolutional stems, deformable token merging), and the position
terms added to tokens.

LITv2's deformable token merging (DTM; LIT, Pan et al., AAAI 2022,
arXiv:2105.14217; LITv2, arXiv:2205.13213) samples as mmcv's
``deform_conv2d`` (what the official code uses):
:func:`~vattn_mm.ops.deform_conv.deform_conv2d` (torchvision's operator, or
its gathered form in eager training: fast path ``gathered_deform_conv``); for
ONNX export the same sampling runs in plain operators
(:func:`~vattn_mm.layers.export_ops.deform_conv2d_sampled`).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..ops import DepthwiseConv2d, TokenMapConv2d, is_exporting
from ..ops.deform_conv import deform_conv2d
from .bricks import build_activation, build_norm
from .builder import register_layer, register_position, register_tokeniser
from .export_ops import deform_conv2d_sampled

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


IntLike = Union[int, torch.Tensor]


def pad_to_multiple(side: IntLike, multiple: int) -> IntLike:
    """Padding that brings ``side`` to a multiple of ``multiple``; positive
    operands only, so the traced arithmetic (truncating) gives it too."""
    return (multiple - side % multiple) % multiple


def needs_padding(*pads: IntLike) -> bool:
    """Whether to pad: any non-zero padding, or always while exporting (the
    sizes are symbolic there; zero padding is a no-op)."""
    return is_exporting() or any(bool(p) for p in pads)


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
        self.norm = build_norm(norm_cfg, embed_dims) if norm_cfg else nn.Identity()

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
                       build_norm(norm_cfg, dims),
                       build_activation(act_cfg)]
            channels = dims
        layers.append(nn.Conv2d(channels, embed_dims, 1))
        self.stride = math.prod(strides)
        self.convs = nn.Sequential(*layers)
        self.norm = build_norm(out_norm_cfg, embed_dims) if out_norm_cfg else nn.Identity()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        x, hw = map_to_tokens(self.convs(x))
        return self.norm(x), hw


class DilateStem(ConvStem):
    """The official "overlapping" stem (stride 4): three 3x3 conv-BN-GELU
    layers with strides 1, 2, 1 and ``hidden_dims * (1, 2, 4)`` channels, then
    a bias-free 3x3 stride-2 convolution, no output norm.

    It is :class:`ConvStem` with a 3x3 stride-2 bias-free final projection
    instead of the 1x1 one (same module indices as the official
    ``patch_embed.proj``)."""

    def __init__(self, in_channels: int, embed_dims: int, hidden_dims: int = 16):
        hidden = (hidden_dims, 2 * hidden_dims, 4 * hidden_dims)
        super().__init__(in_channels, embed_dims, hidden_dims=hidden, strides=(1, 2, 1),
                         norm_cfg=dict(type='BN'), act_cfg=dict(type='GELU'),
                         out_norm_cfg=None)
        self.convs[-1] = nn.Conv2d(hidden[-1], embed_dims, 3, 2, 1, bias=False)
        self.stride = 4


class ConvDownsample(nn.Module):
    """Stride-2 convolution (with bias) + BatchNorm on the map, optionally a
    depthwise 3x3 positional conv (official ``PatchMerging``)."""

    def __init__(self, in_channels: int, embed_dims: int, kernel_size: int = 3,
                 cpe: bool = False, norm_cfg: dict = dict(type='BN')):
        super().__init__()
        self.proj = TokenMapConv2d(in_channels, embed_dims, kernel_size, 2,
                                   (kernel_size - 1) // 2)
        self.norm = build_norm(norm_cfg, embed_dims)
        self.stride = 2
        if cpe:
            self.pos_embed = DepthwiseConv2d(embed_dims, 3)
        self.cpe = cpe

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        x = self.norm(self.proj(x))
        if self.cpe:
            x = x + self.pos_embed(x)
        return map_to_tokens(x)


class BiasedDeformConv2d(nn.Module):
    """Deformable convolution v1 (Dai et al., ICCV 2017, arXiv:1703.06211)
    with a bias, its sampling offsets predicted from the input by
    ``conv_offset``, a plain convolution of the same geometry (mmcv's
    ``DeformConv2dPack`` plus a bias).

    Offset channel ``2 * k`` is the y (row) shift of kernel tap ``k`` and
    ``2 * k + 1`` its x shift; samples are bilinear, zero outside the map.
    ``conv_offset`` starts at zero, i.e. as a plain convolution.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int = 1, padding: int = 0):
        super().__init__()
        self.stride, self.padding = stride, padding
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels,
                                               kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.conv_offset = nn.Conv2d(in_channels, 2 * kernel_size * kernel_size,
                                     kernel_size, stride, padding)
        self.gathered = ops.switch('gathered_deform_conv')
        ops.deform_conv.load_kernels()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Conv2d``'s initialisation for the kernel and bias, zero offsets."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.weight[0].numel())
        nn.init.uniform_(self.bias, -bound, bound)
        self.init_offset()

    def init_offset(self) -> None:
        nn.init.zeros_(self.conv_offset.weight)
        nn.init.zeros_(self.conv_offset.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offset = self.conv_offset(x)
        if is_exporting():   # the dispatcher op has no ONNX form: the same sampling in plain ops
            out = deform_conv2d_sampled(x.contiguous(), offset, self.weight, self.stride,
                                        self.padding)
            return out + self.bias.view(1, -1, 1, 1)
        return deform_conv2d(x, offset, self.weight, self.bias, self.stride, self.padding,
                             fast=self.gathered.on(x))


@register_layer
class DeformableTokenMerging(nn.Module):
    """``kernel_size`` x ``kernel_size`` stride-``kernel_size`` deformable conv
    (:class:`BiasedDeformConv2d`) -> norm -> activation; takes a (B, C, H, W)
    map and returns tokens (B, N, out_channels) and their size.  Odd sides are
    floored, as by the official DTM.

    Args:
        in_channels / out_channels: channels before / after merging.
        kernel_size: kernel size and stride (2 in LITv2).
        norm_cfg: norm after the convolution (LITv2: BatchNorm).
        act_cfg: activation after the norm (LITv2: GELU).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 2,
                 norm_cfg: dict = dict(type='BN'), act_cfg: dict = dict(type='GELU')):
        super().__init__()
        self.kernel_size = self.stride = kernel_size
        self.dconv = BiasedDeformConv2d(in_channels, out_channels, kernel_size,
                                        stride=kernel_size)
        self.norm = build_norm(norm_cfg, out_channels)
        self.act = build_activation(act_cfg)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, Size]:
        h, w = x.shape[-2:]
        if h < self.kernel_size or w < self.kernel_size:
            raise ValueError(f'DeformableTokenMerging: a {h}x{w} map is smaller than '
                             f'its {self.kernel_size}x{self.kernel_size} kernel; '
                             'the input image is too small')
        # the norm runs on a channels-last map, the layout of the token view the
        # gradient arrives in: PyTorch's CPU BatchNorm backward is wrong for a
        # contiguous NCHW batch-1 input with a channels-last output gradient
        y = self.dconv(x).contiguous(memory_format=torch.channels_last)
        return map_to_tokens(self.act(self.norm(y)))


def init_position_bias_(bias: torch.Tensor, std: float = .02) -> torch.Tensor:
    """Initialise a learned position-bias table in place: ``N(0, std)``, what
    the papers' ``trunc_normal_(std=.02)`` gives (its bounds are +-2, a
    hundred standard deviations away).  A plain normal also builds under
    ``FakeTensorMode``, which the FLOP counter uses."""
    return nn.init.normal_(bias, std=std)


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

"""Efficient multi-head self-attention (E-MSA) of ResT ("ResT: An Efficient
Transformer for Visual Recognition", Zhang & Yang, arXiv:2105.13677)."""
from __future__ import annotations

from typing import Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import TokenMapConv2d, is_exporting
from .attention import attention_width, merge_heads, split_heads
from .builder import register_mixer
from .tokens import Size, map_to_tokens, needs_padding, tokens_to_map

#: constructor arguments of the official ``models/rest.py:Attention`` and ours
_OFFICIAL_ARGS = {'dim': 'embed_dims', 'num_heads': 'num_heads', 'qkv_bias': 'qkv_bias',
                  'qk_scale': 'qk_scale', 'attn_drop': 'attn_drop', 'proj_drop': 'proj_drop',
                  'sr_ratio': 'sr_ratio', 'apply_transform': 'apply_transform'}


@register_mixer
class EfficientMultiHeadAttention(nn.Module):
    """ResT's E-MSA: multi-head attention whose keys and values come from a
    depthwise-reduced map, with an optional head-mixing attention transform.

    Keys and values: the token map goes through a depthwise conv with kernel
    ``sr + 1``, stride ``sr``, padding ``sr // 2`` and a LayerNorm (none when
    ``sr_ratio == 1``), so there are about N / sr^2 keys.  With
    ``apply_transform`` (ResT's released models) a 1x1 conv mixes the heads'
    logits before the softmax and an InstanceNorm over each head's (N, N')
    probability map (eps 1e-5, no affine) follows it; the rows then no longer
    sum to one, so that path is written out (cost O(N N' C) time and
    O(heads N N') memory).  Without it attention runs through
    :func:`torch.nn.functional.scaled_dot_product_attention`.

    With one head the transform is off, as in the official code: a 1x1 conv
    over a single head only rescales the logits, and the released
    checkpoints hold no transform parameters for one-head stages.

    Any map size works: the official conv output is
    ``floor((H + 2 * (sr // 2) - sr - 1) / sr) + 1``; the only size it
    refuses (a 1-pixel side with an odd ``sr``) is zero-padded to 2 here.

    Args:
        embed_dims: token channels.
        num_heads: heads; ``embed_dims`` must be divisible by it.
        sr_ratio: key / value reduction (ResT: 8, 4, 2, 1 for strides 4 ... 32).
        apply_transform: mix heads before the softmax and instance-normalise
            after it (only with ``num_heads > 1``).
        qkv_bias: bias of the query and key / value projections.
        qk_scale: logit scale, ``head_dim ** -0.5`` when None.
        attn_drop: dropout on the attention weights (training only).
        proj_drop: dropout after the output projection.
        attn_dims: width of queries, keys and values (default ``embed_dims``).
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """The released ResT models: ``sr_ratio`` 8, 4, 2, 1 for strides
        4 ... 32 and the attention transform (wherever a stage has more than
        one head)."""
        return dict(sr_ratio=(8, 4, 2, 1)[min(stage, 3)], apply_transform=True)

    def __init__(self, embed_dims: int, num_heads: int = 1, sr_ratio: int = 1,
                 apply_transform: bool = False, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.,
                 proj_drop: float = 0., attn_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if sr_ratio < 1:
            raise ValueError(f'EfficientMultiHeadAttention: sr_ratio must be >= 1, '
                             f'got {sr_ratio}')
        self.num_heads = num_heads
        self.scale = qk_scale or (width // num_heads) ** -0.5
        self.attn_drop = attn_drop
        self.sr_ratio = sr_ratio
        self.q = nn.Linear(embed_dims, width, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        if sr_ratio > 1:
            self.sr = TokenMapConv2d(embed_dims, embed_dims, sr_ratio + 1, sr_ratio,
                                     sr_ratio // 2, groups=embed_dims)
            self.sr_norm = nn.LayerNorm(embed_dims)
        self.apply_transform = apply_transform and num_heads > 1
        if self.apply_transform:
            self.transform_conv = nn.Conv2d(num_heads, num_heads, 1)

    def reduce(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        """Tokens the keys and values are computed from."""
        if self.sr_ratio == 1:
            return x
        x = tokens_to_map(x, hw)
        # the conv needs sides >= kernel - 2 * padding (2 for an odd ratio, else 1)
        small = self.sr_ratio + 1 - 2 * (self.sr_ratio // 2)
        if is_exporting():   # traced sizes: clamp in the graph
            pad_b, pad_r = (torch.clamp(small - torch.as_tensor(side), min=0) for side in hw)
        else:
            pad_b, pad_r = max(0, small - hw[0]), max(0, small - hw[1])
        if needs_padding(pad_b, pad_r):
            x = F.pad(x, (0, pad_r, 0, pad_b))
        return self.sr_norm(map_to_tokens(self.sr(x))[0])

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        q = split_heads(self.q(x), self.num_heads)
        k, v = split_heads(self.kv(self.reduce(x, hw)), 2 * self.num_heads).chunk(2, dim=1)
        drop = self.attn_drop if self.training else 0.
        if self.apply_transform:
            logits = (q @ k.transpose(-2, -1)) * self.scale        # (B, heads, N, N')
            probs = self.transform_conv(logits).softmax(dim=-1)
            probs = F.instance_norm(probs, eps=1e-5)
            out = F.dropout(probs, drop, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, scale=self.scale)
        return self.proj_drop(self.proj(merge_heads(out)))

    @staticmethod
    def convert_official_state_dict(state_dict: Mapping[str, torch.Tensor]
                                    ) -> dict[str, torch.Tensor]:
        """The official ``Attention``'s state dict in our keys: the names are
        the same (``q``, ``kv``, ``proj``, ``sr``, ``sr_norm``,
        ``transform_conv``); ``transform_norm`` has no state.  A copy, so
        ``load_state_dict(strict=True)`` reports anything unexpected."""
        return dict(state_dict)

    @classmethod
    def from_official(cls, state_dict: Mapping[str, torch.Tensor],
                      **official_args) -> 'EfficientMultiHeadAttention':
        """Our module built from the official constructor arguments (``dim``,
        ``num_heads``, ``qkv_bias`` (official default False), ``qk_scale``,
        ``sr_ratio``, ``apply_transform``, ...) with the official weights
        loaded strictly."""
        unknown = set(official_args) - set(_OFFICIAL_ARGS)
        if unknown:
            raise TypeError(f'EfficientMultiHeadAttention.from_official: unknown official '
                            f'arguments {sorted(unknown)}; expected {sorted(_OFFICIAL_ARGS)}')
        kwargs = {_OFFICIAL_ARGS[k]: v for k, v in official_args.items()}
        kwargs.setdefault('qkv_bias', False)      # the official default
        kwargs.setdefault('num_heads', 8)
        module = cls(**kwargs)
        module.load_state_dict(cls.convert_official_state_dict(state_dict))
        return module

"""The helpers multi-head token mixers share: head-count checks, the width of
queries, keys and values, position-bias init, and splitting / merging heads."""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn


def check_heads(owner: str, embed_dims: int, num_heads: int, name: str = 'embed_dims') -> None:
    """Raise a ``ValueError`` naming ``owner`` unless ``num_heads`` is
    positive and divides ``embed_dims`` (called ``name`` in the message)."""
    if num_heads < 1 or embed_dims % num_heads:
        raise ValueError(f'{owner}: {name} {embed_dims} is not divisible by '
                         f'num_heads {num_heads}')


def attention_width(owner: str, embed_dims: int, num_heads: int,
                    attn_dims: Optional[int] = None) -> int:
    """Channels of a mixer's queries, keys and values: ``attn_dims``, or
    ``embed_dims`` when it is None (the papers' choice).  Checked against
    ``num_heads``; a ``ValueError`` names ``owner`` otherwise.

    ``attn_dims`` widens or narrows the projections without changing what
    the mixer computes: inputs and outputs keep ``embed_dims`` channels."""
    check_heads(owner, embed_dims, num_heads)
    if attn_dims is None:
        return embed_dims
    if not isinstance(attn_dims, int) or attn_dims < 1:
        raise ValueError(f'{owner}: attn_dims must be a positive int, got {attn_dims!r}')
    check_heads(owner, attn_dims, num_heads, name='attn_dims')
    return attn_dims


def init_position_bias_(bias: torch.Tensor, std: float = .02) -> torch.Tensor:
    """Initialise a learned position-bias table in place: ``N(0, std)``, what
    the papers' ``trunc_normal_(std=.02)`` gives (its bounds are +-2, a
    hundred standard deviations away).  A plain normal also builds under
    ``FakeTensorMode``, which the FLOP counter uses."""
    return nn.init.normal_(bias, std=std)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, C) -> (B, heads, N, C // heads)."""
    b, n, c = x.shape
    return x.view(b, n, num_heads, c // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, d) -> (B, N, heads * d)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)

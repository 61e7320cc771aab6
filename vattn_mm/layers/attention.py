"""Multi-head attention: the helpers multi-head token mixers share (head-count
checks, the width of queries, keys and values, splitting / merging
heads) and global self-attention over all tokens (ViT, Dosovitskiy et
al., arXiv:2010.11929; DilateFormer's last stages), optionally with CSWin's
locally-enhanced positional encoding (LePE, Dong et al., arXiv:2107.00652)."""
from __future__ import annotations

from typing import Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from .builder import register_mixer
from .tokens import Size, map_to_tokens, tokens_to_map


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


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, C) -> (B, heads, N, C // heads)."""
    b, n, c = x.shape
    return x.view(b, n, num_heads, c // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, d) -> (B, N, heads * d)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


#: CSWin ``CSWinBlock`` key prefix -> ours (the last stage's single full-map branch)
_CSWIN_KEYS = {'qkv.': 'qkv.', 'proj.': 'proj.', 'attns.0.get_v.': 'lepe.'}


@register_mixer
class GlobalSelfAttention(nn.Module):
    """Multi-head self-attention over all tokens with one ``qkv`` linear
    (``[3A, C]``, channels ``q | k | v``; ``A = attn_dims``, default ``C``)
    through :func:`torch.nn.functional.scaled_dot_product_attention`.

    ``lepe=True`` adds CSWin's LePE: ``softmax(q k^T / sqrt(d)) v +
    dwconv3x3(v)`` before ``proj``, the depthwise conv (zero padding, with
    bias; ``lepe``) over the value map of all ``A`` channels.  Over the whole
    map this is CSWin's last-stage attention (``CSWinBlock`` with one
    ``LePEAttention`` branch whose stripe is the whole map):
    ``proj(attns[0](qkv(x)))``; :meth:`convert_official_cswin_state_dict`
    maps its keys.  (CSWin's earlier stages attend within stripes and
    convolve each stripe apart: not this module.)
    """

    scaling = 'quadratic'
    full_attention = True
    inner_width = 'attn_dims'
    #: the position terms this mixer holds, run by the position suite
    position_variants = {'cswin_lepe': dict(lepe=True)}

    def __init__(self, embed_dims: int, num_heads: int, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0.,
                 proj_drop: float = 0., attn_dims: Optional[int] = None,
                 lepe: bool = False):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        self.num_heads = num_heads
        self.scale = qk_scale
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, 3 * width, bias=qkv_bias)
        self.has_lepe = lepe
        if lepe:
            self.lepe = ops.DepthwiseConv2d(width, 3)
        self.proj = nn.Linear(width, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @staticmethod
    def convert_official_cswin_state_dict(state_dict: Mapping[str, torch.Tensor]
                                          ) -> dict[str, torch.Tensor]:
        """Ours (``lepe=True``) from the attention part of an official CSWin
        last-stage ``CSWinBlock``: ``qkv.*``, ``proj.*``, ``attns.0.get_v.*``
        (its norms and MLP are the block's)."""
        out = {}
        for key, value in state_dict.items():
            prefix = next((p for p in _CSWIN_KEYS if key.startswith(p)), None)
            if prefix is None:
                raise KeyError(f'GlobalSelfAttention: {key!r} is not a key of a CSWin last-stage '
                               f'attention ({sorted(_CSWIN_KEYS)})')
            out[_CSWIN_KEYS[prefix] + key[len(prefix):]] = value
        return out

    def forward(self, x: torch.Tensor, hw: Optional[Size] = None) -> torch.Tensor:
        q, k, v = split_heads(self.qkv(x), 3 * self.num_heads).chunk(3, dim=1)
        out = merge_heads(F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_drop if self.training else 0., scale=self.scale))
        if self.has_lepe:
            if hw is None:
                raise ValueError('GlobalSelfAttention with lepe needs the map size hw')
            out = out + map_to_tokens(self.lepe(tokens_to_map(merge_heads(v), hw)))[0]
        return self.proj_drop(self.proj(out))

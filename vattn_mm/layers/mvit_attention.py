"""Pooling attention of MViTv2 ("MViTv2: Improved Multiscale Vision
Transformers for Classification and Detection", Li et al., arXiv:2112.01526)."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import TokenMapConv2d
from .attention import attention_width, merge_heads, split_heads
from .builder import register_mixer
from .tokens import Size, init_position_bias_, map_to_tokens, tokens_to_map

IntPair = Union[int, Sequence[int]]

#: constructor arguments of the official ``mvit/models/attention.py:MultiScaleAttention``
#: and ours (``mode`` must be 'conv', ``pool_first`` False; ``dim_out`` sets
#: ``attn_dims`` and ``out_dims``)
_OFFICIAL_ARGS = {'dim': 'embed_dims', 'num_heads': 'num_heads', 'qkv_bias': 'qkv_bias',
                  'kernel_q': 'kernel_q', 'kernel_kv': 'kernel_kv', 'stride_q': 'stride_q',
                  'stride_kv': 'stride_kv', 'has_cls_embed': 'has_cls_token',
                  'rel_pos_spatial': 'rel_pos', 'rel_pos_zero_init': 'rel_pos_zero_init',
                  'residual_pooling': 'residual_pooling', 'input_size': 'input_size'}


def _pair(value: IntPair, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value) or (1, 1)
    if len(pair) != 2 or any(int(v) != v or v < 1 for v in pair):
        raise ValueError(f'MultiScalePoolingAttention: {name} must be a positive int or '
                         f'a pair of them, got {value!r}')
    return int(pair[0]), int(pair[1])


def rel_pos_table(table: torch.Tensor, q_size: int, k_size: int) -> torch.Tensor:
    """(q_size, k_size, dim) embeddings of the query-key offsets along one axis.

    The offsets are scaled to the finer of the two grids (MViTv2's
    stride-ratio scaling; the float offsets are truncated to integers).  A
    table whose length is not ``2 * max(q_size, k_size) - 1`` is first
    resized linearly, as the official detection code (detectron2's MViTv2)
    does for inputs of another size than the training one.
    """
    length = 2 * max(q_size, k_size) - 1
    if table.shape[0] != length:
        table = F.interpolate(table.t()[None], size=length, mode='linear')[0].t()
    q_ratio, k_ratio = max(k_size / q_size, 1.), max(q_size / k_size, 1.)
    dist = (torch.arange(q_size, device=table.device)[:, None] * q_ratio
            - torch.arange(k_size, device=table.device)[None, :] * k_ratio
            + (k_size - 1) * k_ratio)
    return table[dist.long()]


@register_mixer
class MultiScalePoolingAttention(nn.Module):
    """MViTv2's pooling attention: multi-head attention whose queries, keys
    and values are pooled by depthwise convs, with decomposed relative
    positions and residual pooling.

    ``qkv`` projects the tokens; each of q, k, v is pooled per head as a map
    by its own depthwise conv (``head_dim`` channels, shared by the heads,
    padding ``kernel // 2``, no bias) and a LayerNorm over ``head_dim``
    (eps 1e-6).  Logits ``(q * head_dim ** -0.5) k^T`` get the decomposed
    relative positions ``q . R_h[dh] + q . R_w[dw]`` (offsets scaled by the
    grid ratio of q and k); after softmax-attention the pooled q is added per
    head to the spatial tokens (residual pooling) before the output
    projection.  Attention runs through
    :func:`torch.nn.functional.scaled_dot_product_attention` with the
    positions as an additive mask (cost O(N N' C) time and O(heads N N')
    memory for the mask, N' = N / stride_kv^2).

    In a pyramid stage use ``stride_q = 1`` (the default): the mixer returns
    as many tokens as it gets (MViT downsamples by q pooling, TokenPyramid's
    patch embeddings do that here); q is then pooled only if ``kernel_q > 1``,
    as in MViTv2's non-downsampling blocks (``kernel_q`` 1, no ``norm_q``).
    ``stride_q > 1`` and ``has_cls_token`` (token 0 is a class token, left
    out of pooling and positions, normalised with the others) reproduce the
    official module; :meth:`attend` then also returns the pooled grid.

    Sizes: any map works.  The official relative-position tables are sized
    for a square ``input_size`` grid and indexed without resizing (a larger or
    wider map fails there); here they are resized per axis to each call's grid.

    Args:
        embed_dims: input token channels (the official ``dim``).
        num_heads: heads; ``embed_dims`` must be divisible by it.
        kernel_q, kernel_kv: pooling kernels of q and of k / v.
        stride_q, stride_kv: pooling strides (MViTv2: kv stride 4, 2, 1, 1
            for strides 4 ... 32).  Kernel 1 with stride 1 means no pooling.
        input_size: token-grid side the relative-position tables are sized
            for (MViTv2 at 224: 56, 28, 14, 7); any other size is resized.
        has_cls_token: the first token is a class token.
        qkv_bias: bias of the qkv projection.
        rel_pos: add decomposed relative positions.
        rel_pos_zero_init: start the tables at zero (else trunc-normal 0.02).
        residual_pooling: add the pooled q to the attention output.
        norm_eps: eps of the pooling LayerNorms.
        attn_drop: dropout on the attention weights (training only).
        attn_dims: width of queries, keys and values (default ``embed_dims``).
        out_dims: output channels (default ``embed_dims``).  MViTv2's
            stage-transition blocks (official ``dim_out != dim``) have
            ``attn_dims = out_dims = dim_out``; a pyramid's blocks keep
            ``embed_dims`` (the patch embeddings change the width there).
    """

    scaling = 'quadratic'
    inner_width = 'attn_dims'
    #: the position terms this mixer holds, run by the position suite
    position_variants = {'mvitv2_decomposed_rel_pos': {}}

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """MViTv2 (``POOL_KV_STRIDE_ADAPTIVE`` 4 divided by each q stride):
        kv stride 4, 2, 1, 1 with kernel 3, and tables sized for a 224 input
        (token grids 56, 28, 14, 7)."""
        stage = min(stage, 3)
        return dict(stride_kv=(4, 2, 1, 1)[stage], kernel_kv=3, input_size=56 >> stage)

    def __init__(self, embed_dims: int, num_heads: int = 1, kernel_q: IntPair = 1,
                 kernel_kv: IntPair = 3, stride_q: IntPair = 1, stride_kv: IntPair = 1,
                 input_size: int = 56, has_cls_token: bool = False, qkv_bias: bool = True,
                 rel_pos: bool = True, rel_pos_zero_init: bool = False,
                 residual_pooling: bool = True, norm_eps: float = 1e-6,
                 attn_drop: float = 0., attn_dims: Optional[int] = None,
                 out_dims: Optional[int] = None):
        super().__init__()
        width = attention_width(type(self).__name__, embed_dims, num_heads, attn_dims)
        if out_dims is not None and (not isinstance(out_dims, int) or out_dims < 1):
            raise ValueError(f'MultiScalePoolingAttention: out_dims must be a positive int, '
                             f'got {out_dims!r}')
        if not isinstance(input_size, int) or input_size < 1:
            raise ValueError(f'MultiScalePoolingAttention: input_size must be a positive '
                             f'int (the side of a square token grid), got {input_size!r}')
        kernel_q, kernel_kv = _pair(kernel_q, 'kernel_q'), _pair(kernel_kv, 'kernel_kv')
        stride_q, stride_kv = _pair(stride_q, 'stride_q'), _pair(stride_kv, 'stride_kv')
        head_dims = width // num_heads
        self.num_heads = num_heads
        self.scale = head_dims ** -0.5
        self.has_cls_token = has_cls_token
        self.residual_pooling = residual_pooling
        self.attn_drop = attn_drop
        self.stride_q, self.stride_kv = stride_q, stride_kv
        self.qkv = nn.Linear(embed_dims, 3 * width, bias=qkv_bias)
        self.proj = nn.Linear(width, embed_dims if out_dims is None else out_dims)
        for name, kernel, stride in (('q', kernel_q, stride_q), ('k', kernel_kv, stride_kv),
                                     ('v', kernel_kv, stride_kv)):
            if kernel == (1, 1) and stride == (1, 1):
                continue                        # no pooling, as in the official module
            padding = (kernel[0] // 2, kernel[1] // 2)
            self.add_module(f'pool_{name}', TokenMapConv2d(
                head_dims, head_dims, kernel, stride, padding, groups=head_dims, bias=False))
            self.add_module(f'norm_{name}', nn.LayerNorm(head_dims, eps=norm_eps))
        self.rel_pos = rel_pos
        if rel_pos:
            length = 2 * max(input_size // stride_q[1], input_size // stride_kv[1]) - 1
            self.rel_pos_h = nn.Parameter(torch.zeros(length, head_dims))
            self.rel_pos_w = nn.Parameter(torch.zeros(length, head_dims))
            if not rel_pos_zero_init:
                init_position_bias_(self.rel_pos_h)
                init_position_bias_(self.rel_pos_w)

    def pool(self, x: torch.Tensor, hw: Size, name: str) -> tuple[torch.Tensor, Size]:
        """Pool (B, heads, [1 +] H * W, head_dim) with ``pool_<name>`` and
        normalise with ``norm_<name>``; unchanged without that pooling."""
        conv: Optional[nn.Module] = getattr(self, f'pool_{name}', None)
        if conv is None:
            return x, hw
        b, heads, _, d = x.shape
        cls, x = (x[:, :, :1], x[:, :, 1:]) if self.has_cls_token else (None, x)
        y, hw = map_to_tokens(conv(tokens_to_map(x.reshape(b * heads, -1, d), hw)))
        y = y.reshape(b, heads, -1, d)
        if cls is not None:
            y = torch.cat([cls, y], dim=2)
        return getattr(self, f'norm_{name}')(y), hw

    def rel_pos_bias(self, q: torch.Tensor, q_hw: Size, k_hw: Size) -> torch.Tensor:
        """Additive logits (B, heads, Nq, Nk) of the decomposed relative
        positions; zero in the class token's row and column."""
        b, heads, _, d = q.shape
        r_h = rel_pos_table(self.rel_pos_h, q_hw[0], k_hw[0])    # (qh, kh, d)
        r_w = rel_pos_table(self.rel_pos_w, q_hw[1], k_hw[1])    # (qw, kw, d)
        sq = q[:, :, int(self.has_cls_token):].reshape(b, heads, *q_hw, d)
        rel_h = torch.einsum('bnhwd,hkd->bnhwk', sq, r_h)
        rel_w = torch.einsum('bnhwd,wkd->bnhwk', sq, r_w)
        bias = (rel_h[..., :, None] + rel_w[..., None, :]).reshape(
            b, heads, q_hw[0] * q_hw[1], k_hw[0] * k_hw[1])
        return F.pad(bias, (1, 0, 1, 0)) if self.has_cls_token else bias

    def attend(self, x: torch.Tensor, hw: Size) -> tuple[torch.Tensor, Size]:
        """Tokens (B, [1 +] H * W, C) -> (B, [1 +] Hq * Wq, C) and the query
        grid (Hq, Wq), which is (H, W) unless ``stride_q > 1``."""
        expected = hw[0] * hw[1] + int(self.has_cls_token)
        if x.shape[1] != expected:
            raise ValueError(f'MultiScalePoolingAttention: {x.shape[1]} tokens for a '
                             f'{hw[0]}x{hw[1]} map, expected {expected}'
                             + (' (class token first)' if self.has_cls_token else ''))
        q, k, v = split_heads(self.qkv(x), 3 * self.num_heads).chunk(3, dim=1)
        q, q_hw = self.pool(q, hw, 'q')
        k, k_hw = self.pool(k, hw, 'k')
        v, _ = self.pool(v, hw, 'v')
        bias = self.rel_pos_bias(q, q_hw, k_hw) if self.rel_pos else None
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.attn_drop if self.training else 0.,
            scale=self.scale)
        if self.residual_pooling:                # the class token gets no residual
            cls = int(self.has_cls_token)
            out = torch.cat([out[:, :, :cls], out[:, :, cls:] + q[:, :, cls:]], dim=2)
        return self.proj(merge_heads(out)), q_hw

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        return self.attend(x, hw)[0]

    @staticmethod
    def convert_official_state_dict(state_dict: Mapping[str, torch.Tensor]
                                    ) -> dict[str, torch.Tensor]:
        """The official module's state dict in our keys: the names are the same
        (``qkv``, ``proj``, ``pool_q/k/v``, ``norm_q/k/v``, ``rel_pos_h/w``).
        A copy, so ``load_state_dict(strict=True)`` reports anything unexpected."""
        return dict(state_dict)

    @classmethod
    def from_official(cls, state_dict: Mapping[str, torch.Tensor],
                      **official_args) -> 'MultiScalePoolingAttention':
        """Our module built from the official ``MultiScaleAttention``
        arguments (``dim``, ``dim_out``, ``input_size``, ``num_heads``,
        ``kernel_q``, ``stride_kv``, ``has_cls_embed``, ...) with the official
        weights loaded strictly.  ``norm_layer`` must be a LayerNorm (its eps
        is read from ``norm_eps``, MViTv2's 1e-6 by default).  ``dim_out !=
        dim`` (a stage-transition block's attention: ``qkv`` to ``3 *
        dim_out``, heads of ``dim_out // num_heads``, ``proj`` to ``dim_out``)
        gives ``attn_dims = out_dims = dim_out``."""
        args = dict(official_args)
        dim_out = args.pop('dim_out', args.get('dim'))
        mode, pool_first = args.pop('mode', 'conv'), args.pop('pool_first', False)
        args.pop('norm_layer', None)
        norm_eps = args.pop('norm_eps', 1e-6)
        if mode != 'conv' or pool_first:
            raise ValueError(
                "MultiScalePoolingAttention.from_official supports mode='conv', "
                f'pool_first=False; got mode={mode!r}, pool_first={pool_first}')
        unknown = set(args) - set(_OFFICIAL_ARGS)
        if unknown:
            raise TypeError(f'MultiScalePoolingAttention.from_official: unknown official '
                            f'arguments {sorted(unknown)}')
        kwargs = {_OFFICIAL_ARGS[k]: v for k, v in args.items()}
        size = kwargs.pop('input_size', None)
        if size is not None:
            size = _pair(size, 'input_size')
            if size[0] != size[1]:
                raise ValueError(f'MultiScalePoolingAttention.from_official: the official '
                                 f'input_size must be square, got {list(size)}')
            kwargs['input_size'] = size[0]
        # the official defaults where they differ from ours
        for key, value in (('num_heads', 8), ('qkv_bias', False), ('kernel_kv', 1),
                           ('has_cls_token', True), ('rel_pos', False)):
            kwargs.setdefault(key, value)
        if dim_out != kwargs.get('embed_dims'):
            kwargs.update(attn_dims=dim_out, out_dims=dim_out)
        module = cls(norm_eps=norm_eps, **kwargs)
        module.load_state_dict(cls.convert_official_state_dict(state_dict))
        return module

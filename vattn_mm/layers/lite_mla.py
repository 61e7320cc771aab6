"""Lite multi-scale linear attention (EfficientViT, "EfficientViT: Multi-Scale
Linear Attention for High-Resolution Dense Prediction", Cai et al., ICCV 2023,
arXiv:2205.14756)."""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..ops import TokenMapConv2d
from .attention import check_heads, merge_heads
from .bricks import build_activation
from .builder import register_mixer
from .mbconv import ConvNormAct
from .tokens import Size, map_to_tokens, tokens_to_map

Cfg = Optional[Mapping[str, Any]]

#: the official ``act_func`` / ``kernel_func`` names (efficientvit/models/nn/act.py)
#: as mmcv activation configs
OFFICIAL_ACTS = {
    'relu': dict(type='ReLU'), 'relu6': dict(type='ReLU6'), 'hswish': dict(type='HSwish'),
    'silu': dict(type='SiLU'), 'gelu': dict(type='GELU', approximate='tanh')}
#: the official ``norm`` names this module maps (the map norms of its convs)
OFFICIAL_NORMS = {'bn2d': 'BN'}


def relu_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          eps: float = 1e-15) -> torch.Tensor:
    """``q (k^T v) / (q k^T 1 + eps)`` for (B, heads, N, d) non-negative q, k.

    The normaliser comes from the same matmuls: ``v`` gets a column of ones,
    so the last output column is ``q . sum_n k_n``.  Cost O(N d^2) per head;
    the largest intermediate is (B, heads, N, d + 1), never N x N.
    """
    v = F.pad(v, (0, 1), value=1.)
    out = q @ (k.transpose(-1, -2) @ v)
    return out[..., :-1] / (out[..., -1:] + eps)


def relu_quadratic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             eps: float = 1e-15) -> torch.Tensor:
    """The same attention through the (B, heads, N, N) score matrix: scores
    ``q k^T`` divided by their sum over keys (+ eps), times ``v``.  Cheaper
    than the linear form while N <= d."""
    scores = q @ k.transpose(-1, -2)
    return (scores / (scores.sum(-1, keepdim=True) + eps)) @ v


def _pair(value: Any) -> tuple:
    """A (qkv, proj) pair from one value for both or a pair (official val2tuple)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f'LiteMLA: expected one value or a (qkv, proj) pair, got {value!r}')
        return tuple(value)
    return value, value


@register_mixer
class LiteMLA(nn.Module):
    """EfficientViT's lightweight multi-scale ReLU linear attention.

    A 1x1 conv makes q, k, v for ``heads`` heads of ``head_dims`` channels.
    Each scale ``s`` of ``scales`` adds as many heads again, aggregated from
    neighbouring tokens: a depthwise ``s x s`` conv and a 1x1 conv grouped
    per head and q/k/v.  Every head (``heads * (1 + len(scales))`` in all)
    attends with the ReLU kernel, ``relu(q) (relu(k)^T v) / (relu(q)
    relu(k)^T 1 + eps)``, and a 1x1 conv + BatchNorm projects the
    concatenated heads back to ``embed_dims``.

    Cost: O(N d^2) per head plus the convolutions, linear in the number of
    tokens N; no N x N matrix is formed.  As in the official module, a map of
    N <= ``head_dims`` tokens takes the quadratic form (same values, cheaper
    there).  There is no softmax, so ``scaled_dot_product_attention`` does
    not apply.  The attention runs in float32 (float64 stays float64) with
    autocast off.  The official code runs the matmuls in the incoming half
    precision and only the division in float32; in float16 the sums over
    tokens in ``k^T v`` can overflow.  Any map size works (the convs pad
    "same"), as in the official module.

    Heads: ``num_heads`` (from the pyramid) gives ``embed_dims // num_heads``
    channels per head; ``head_dims`` (official ``dim``), when set, wins and
    gives ``embed_dims // head_dims`` heads (official rule).  Either count is
    then scaled by ``heads_ratio`` (rounded down).  The parameters and their
    keys are the official ones (``qkv.conv``, ``aggreg.{i}.{0,1}``,
    ``proj.conv``, ``proj.norm``); see :meth:`from_official`.

    Args:
        embed_dims: token channels (in and out).
        num_heads: heads when ``head_dims`` is None.
        head_dims: channels per head (official ``dim``; 16 / 32 in B1-B3).
        heads_ratio: factor on the number of heads.
        scales: kernel sizes (odd) of the multi-scale aggregation branches.
        use_bias: conv biases, one bool or a (qkv + aggregation, proj) pair.
        norm_cfg: map norm after the (qkv, proj) convs, one config or a pair.
        act_cfg: activation after the (qkv, proj) convs, one config or a pair.
        kernel_cfg: the feature map on q and k (ReLU).
        eps: added to the normaliser.
    """

    scaling = 'linear'

    def __init__(self, embed_dims: int, num_heads: int = 1, head_dims: Optional[int] = None,
                 heads_ratio: float = 1.0, scales: Sequence[int] = (5, ),
                 use_bias: Union[bool, Sequence[bool]] = False,
                 norm_cfg: Union[Cfg, Sequence[Cfg]] = (None, dict(type='BN')),
                 act_cfg: Union[Cfg, Sequence[Cfg]] = (None, None),
                 kernel_cfg: Cfg = dict(type='ReLU'), eps: float = 1e-15):
        super().__init__()
        if head_dims is None:
            check_heads(type(self).__name__, embed_dims, num_heads)
            head_dims, base_heads = embed_dims // num_heads, num_heads
        elif head_dims < 1:
            raise ValueError(f'LiteMLA: head_dims must be >= 1, got {head_dims}')
        else:
            base_heads = embed_dims // head_dims
        heads = int(base_heads * heads_ratio)
        if heads < 1:
            raise ValueError(f'LiteMLA: no heads: embed_dims {embed_dims}, head_dims '
                             f'{head_dims}, heads_ratio {heads_ratio} give {heads} heads')
        scales = tuple(scales)
        if any(s < 1 or s % 2 == 0 for s in scales):
            raise ValueError(f'LiteMLA: scales must be odd kernel sizes, got {scales}')
        qkv_bias, proj_bias = _pair(use_bias)
        qkv_norm, proj_norm = _pair(norm_cfg)
        qkv_act, proj_act = _pair(act_cfg)
        if kernel_cfg is None:
            raise ValueError('LiteMLA: kernel_cfg is required (the feature map on q and k, '
                             "e.g. dict(type='ReLU'))")
        self.head_dims = head_dims
        self.heads = heads
        self.scales = scales
        self.eps = eps
        total = 3 * heads * head_dims  # q, k and v channels of one branch
        self.qkv = ConvNormAct(embed_dims, total, bias=qkv_bias, norm_cfg=qkv_norm,
                               act_cfg=qkv_act)
        self.aggreg = nn.ModuleList(
            nn.Sequential(
                TokenMapConv2d(total, total, s, padding=s // 2, groups=total, bias=qkv_bias),
                TokenMapConv2d(total, total, 1, groups=3 * heads, bias=qkv_bias))
            for s in scales)
        self.kernel_func = build_activation(kernel_cfg)
        self.proj = ConvNormAct(heads * head_dims * (1 + len(scales)), embed_dims,
                                bias=proj_bias, norm_cfg=proj_norm, act_cfg=proj_act)

    def is_linear(self, num_tokens: int) -> bool:
        """Whether a map of ``num_tokens`` tokens takes the linear form (the
        official rule ``H * W > dim``)."""
        return num_tokens > self.head_dims

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """ReLU-kernel attention of (B, heads, N, d) q, k, v in at least
        float32 with autocast off; the result in the dtype of ``v``."""
        dtype, device = v.dtype, v.device.type
        compute = torch.promote_types(dtype, torch.float32)
        autocast_on = ops.autocast_on(device)
        with torch.autocast(device, enabled=False) if autocast_on else nullcontext():
            q = self.kernel_func(q.to(compute))
            k = self.kernel_func(k.to(compute))
            form = relu_linear_attention if self.is_linear(q.shape[2]) \
                else relu_quadratic_attention
            out = form(q, k, v.to(compute), self.eps)
        return out.to(dtype)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, _ = x.shape
        if hw[0] * hw[1] != n:
            raise ValueError(f'LiteMLA: {n} tokens do not form a {hw[0]}x{hw[1]} map')
        qkv = self.qkv(tokens_to_map(x, hw))
        qkv = torch.cat([qkv] + [branch(qkv) for branch in self.aggreg], dim=1)
        # channels are head-major, each head q | k | v: (B, N, heads_all, 3, d)
        qkv = qkv.permute(0, 2, 3, 1).reshape(b, n, -1, 3, self.head_dims)
        q, k, v = qkv.permute(3, 0, 2, 1, 4)
        out = merge_heads(self.attend(q, k, v))
        return map_to_tokens(self.proj(tokens_to_map(out, hw)))[0]

    @staticmethod
    def official_kwargs(in_channels: int, out_channels: int, heads: Optional[int] = None,
                        heads_ratio: float = 1.0, dim: int = 8, use_bias: Any = False,
                        norm: Any = (None, 'bn2d'), act_func: Any = (None, None),
                        kernel_func: str = 'relu', scales: Sequence[int] = (5, ),
                        eps: float = 1e-15, norm_eps: float = 1e-5) -> dict:
        """Our constructor arguments for the official ``LiteMLA(...)`` ones.

        ``norm_eps``: the BatchNorm eps, what the official ``set_norm_eps``
        sets (B series 1e-5, L series 1e-7).
        """
        if in_channels != out_channels:
            raise ValueError(f'LiteMLA: a token mixer keeps its channels; official '
                             f'in_channels {in_channels} != out_channels {out_channels}')

        def act(name: Optional[str]) -> Cfg:
            if name is None:
                return None
            if name not in OFFICIAL_ACTS:
                raise ValueError(f'LiteMLA: official activation {name!r} is not one of '
                                 f'{sorted(OFFICIAL_ACTS)}')
            return dict(OFFICIAL_ACTS[name])

        def norm_cfg(name: Optional[str]) -> Cfg:
            if name is None:
                return None
            if name not in OFFICIAL_NORMS:
                raise ValueError(f'LiteMLA: official norm {name!r} is not supported, only '
                                 f'{sorted(OFFICIAL_NORMS)} or None')
            return dict(type=OFFICIAL_NORMS[name], eps=norm_eps)

        kwargs = dict(embed_dims=in_channels, head_dims=dim, heads_ratio=heads_ratio,
                      scales=tuple(scales), use_bias=_pair(use_bias),
                      norm_cfg=tuple(norm_cfg(n) for n in _pair(norm)),
                      act_cfg=tuple(act(a) for a in _pair(act_func)),
                      kernel_cfg=act(kernel_func), eps=eps)
        if heads is not None:
            # an explicit head count: express it as the ratio on in_channels // dim
            base = in_channels // dim
            if base < 1 or int(base * (heads / base)) != heads:
                raise ValueError(f'LiteMLA: official heads={heads} with dim={dim} and '
                                 f'in_channels={in_channels} cannot be expressed')
            kwargs['heads_ratio'] = heads / base
        return kwargs

    @classmethod
    def from_official(cls, state_dict: Mapping[str, torch.Tensor],
                      norm_eps: float = 1e-5, **official_args: Any) -> 'LiteMLA':
        """A LiteMLA with the weights of an official ``LiteMLA(**official_args)``.

        ``state_dict``: that module's ``state_dict()`` (in a full EfficientViT
        checkpoint, the keys under ``...context_module.main.``).  The keys are
        the same here; they are loaded strictly.
        """
        module = cls(**cls.official_kwargs(**official_args, norm_eps=norm_eps))
        module.load_state_dict(state_dict, strict=True)
        return module

"""Agent attention ("Agent Attention: On the Integration of Softmax and Linear
Attention", Han et al., arXiv:2312.08874), as in the dense Agent-PVT backbone."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import TokenMapConv2d
from .attention import check_heads, merge_heads, split_heads
from .bricks import build_norm
from .builder import register_mixer
from .export_ops import adaptive_avg_pool2d
from .tokens import Size, init_position_bias_, map_to_tokens, tokens_to_map

#: Agent-PVT per stage (stride 4 / 8 / 16 / 32): agents in training, the
#: agent grids of the released detection / segmentation configs, and the
#: token-grid side of 224 x 224 ImageNet training (the size of the biases)
AGENT_PVT_AGENT_NUM = (9, 16, 49, 49)
AGENT_PVT_AGENT_SHAPES = ((12, 12), (16, 16), (28, 28), (28, 28))
AGENT_PVT_WINDOWS = (56, 28, 14, 7)


def _bilinear(x: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    # the official resize: bilinear, align_corners=False, no antialiasing
    return F.interpolate(x, size=tuple(size), mode='bilinear', align_corners=False)


@register_mixer
class AgentAttention(nn.Module):
    """Softmax attention routed through a small set of agent tokens.

    The agents ``A`` are the query map average-pooled to ``agent_shape``.
    Step 1 (agent aggregation): ``V_A = softmax(s A K^T + B_1) V``; step 2
    (agent broadcast): ``out = softmax(s Q A^T + B_2) V_A``; then a depthwise
    ``kernel_size`` conv of the value map is added and the result projected;
    ``s = head_dim ** scale``.  Cost ``O(N * n_agents * C)``: linear in the
    number of tokens ``N``.

    Position biases: ``B_1`` = ``an_bias`` (7 x 7 grid) + ``ah_bias + aw_bias``
    (``window`` x ``window`` grid), ``B_2`` likewise from ``na_bias`` and
    ``ha_bias + wa_bias``.  Each is resized bilinearly twice, as in the
    official dense module: its token grid to the key grid (``B_1``) or the
    query grid (``B_2``), then its sqrt(agent_num) x sqrt(agent_num) agent grid
    to ``agent_shape``; so any input size and any agent grid work with the
    trained biases.

    ``sr_ratio > 1``: keys and values come from the map reduced by a
    ``sr_ratio`` x ``sr_ratio`` strided conv + norm (PVT's SRA, as the
    classification Agent-PVT does; its dense module refuses it) and the value
    map is bilinearly upsampled back for the depthwise conv.  Map sides are
    floored by the reduction and must be at least ``sr_ratio``.

    Args:
        embed_dims: token channels.
        num_heads: heads; ``embed_dims`` must be divisible by it.
        agent_num: agents the biases are trained for, a square (official
            ``agent_num``).
        agent_shape: agent grid at run time (official
            ``downstream_agent_shape``); None: sqrt(agent_num) squared.
        window: token-grid side the ``ah/aw/ha/wa`` biases are trained for
            (official ``int(sqrt(num_patches))``).
        sr_ratio: spatial reduction of keys and values.
        kernel_size: depthwise conv on the values.
        scale: temperature exponent, ``s = head_dim ** scale``.
        qkv_bias: bias of the query / key / value projections.
        attn_drop: dropout on both attention weights (training only).
        norm_cfg: norm after the spatial reduction.
    """

    scaling = 'linear'

    @staticmethod
    def stage_defaults(stage: int) -> dict:
        """Agent-PVT's settings: 9 / 16 / 49 / 49 agents resized to the grids of
        its detection configs (12 / 16 / 28 / 28 squared), biases for 224 x 224
        training, no spatial reduction.  The released models use agent
        attention in every stage (``attn_type='AAAA'``, ``agent_sr_ratios``
        '1111'), so there is no plain-attention stage to stand in for."""
        stage = min(stage, 3)
        return dict(agent_num=AGENT_PVT_AGENT_NUM[stage],
                    agent_shape=AGENT_PVT_AGENT_SHAPES[stage],
                    window=AGENT_PVT_WINDOWS[stage])

    def __init__(self, embed_dims: int, num_heads: int, agent_num: int = 49,
                 agent_shape: Optional[Sequence[int]] = None, window: int = 14,
                 sr_ratio: int = 1, kernel_size: int = 3, scale: float = -0.5,
                 qkv_bias: bool = True, attn_drop: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-5)):
        super().__init__()
        name = type(self).__name__
        check_heads(name, embed_dims, num_heads)
        pool = math.isqrt(agent_num) if agent_num > 0 else 0
        if pool < 1 or pool * pool != agent_num:
            raise ValueError(f'{name}: agent_num must be a positive square (the agents '
                             f'form a grid), got {agent_num}')
        agent_shape = (pool, pool) if agent_shape is None else tuple(agent_shape)
        if len(agent_shape) != 2 or min(agent_shape) < 1:
            raise ValueError(f'{name}: agent_shape must be two positive ints, got {agent_shape}')
        if sr_ratio < 1 or window < sr_ratio:
            raise ValueError(f'{name}: need 1 <= sr_ratio <= window, got sr_ratio={sr_ratio}, '
                             f'window={window}')
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f'{name}: kernel_size must be odd and positive, got {kernel_size}')
        self.num_heads = num_heads
        self.agent_grid = (pool, pool)
        self.agent_shape = agent_shape
        self.sr_ratio = sr_ratio
        self.scale = (embed_dims // num_heads) ** scale
        self.attn_drop = attn_drop
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, 2 * embed_dims, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        if sr_ratio > 1:
            self.sr = TokenMapConv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = build_norm(norm_cfg, embed_dims)
        self.dwc = TokenMapConv2d(embed_dims, embed_dims, kernel_size, padding=kernel_size // 2,
                             groups=embed_dims)
        kv_window = window // sr_ratio
        # official names and shapes; agents before tokens in an/ah/aw, after in na/ha/wa
        self.an_bias = nn.Parameter(torch.zeros(num_heads, agent_num, 7, 7))
        self.na_bias = nn.Parameter(torch.zeros(num_heads, agent_num, 7, 7))
        self.ah_bias = nn.Parameter(torch.zeros(1, num_heads, agent_num, kv_window, 1))
        self.aw_bias = nn.Parameter(torch.zeros(1, num_heads, agent_num, 1, kv_window))
        self.ha_bias = nn.Parameter(torch.zeros(1, num_heads, window, 1, agent_num))
        self.wa_bias = nn.Parameter(torch.zeros(1, num_heads, 1, window, agent_num))
        for bias in (self.an_bias, self.na_bias, self.ah_bias, self.aw_bias, self.ha_bias,
                     self.wa_bias):
            init_position_bias_(bias)

    def extra_repr(self) -> str:
        return (f'heads={self.num_heads}, agents={self.agent_grid} -> {self.agent_shape}, '
                f'sr_ratio={self.sr_ratio}')

    # ------------------------------------------------------------ weights
    @staticmethod
    def official_kwargs(dim: int, num_patches: int, num_heads: int = 8, qkv_bias: bool = False,
                        sr_ratio: int = 1, kernel_size: int = 3, agent_num: int = 49,
                        downstream_agent_shape: Sequence[int] = (7, 7), scale: float = -0.5,
                        attn_drop: float = 0., **ignored: Any) -> dict:
        """Our constructor arguments from the official ``AgentAttention``'s
        (``qk_scale``, ``proj_drop`` and the like have no effect there)."""
        return dict(embed_dims=dim, num_heads=num_heads, agent_num=agent_num,
                    agent_shape=tuple(downstream_agent_shape), window=math.isqrt(num_patches),
                    sr_ratio=sr_ratio, kernel_size=kernel_size, scale=scale,
                    qkv_bias=qkv_bias, attn_drop=attn_drop)

    @staticmethod
    def convert_official_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict:
        """Official ``AgentAttention`` state dict -> ours: the keys and shapes
        are the same (``q``, ``kv``, ``proj``, ``dwc``, ``sr``, ``norm`` and the
        six biases), so a backbone loads official blocks 1:1."""
        return dict(state_dict)

    @classmethod
    def from_official(cls, state_dict: Mapping[str, torch.Tensor],
                      **official_args: Any) -> 'AgentAttention':
        """A module built from the official constructor arguments, loaded
        strictly with the official state dict."""
        module = cls(**cls.official_kwargs(**official_args))
        module.load_state_dict(cls.convert_official_state_dict(state_dict))
        return module

    # ------------------------------------------------------------ forward
    def _resized_bias(self, grids: Sequence[torch.Tensor], hw: Size) -> torch.Tensor:
        """Sum of (heads, agent_num, h_i, w_i) biases, each resized to the
        token grid ``hw``, then the agent grid resized to ``agent_shape``
        -> (heads, tokens, agents)."""
        heads = self.num_heads
        tokens = sum(_bilinear(g, hw) for g in grids).flatten(2)  # (heads, A, N)
        agents = tokens.transpose(1, 2).reshape(heads, -1, *self.agent_grid)  # (heads, N, p, p)
        return _bilinear(agents, self.agent_shape).flatten(2)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        heads = self.num_heads
        drop = self.attn_drop if self.training else 0.
        q = self.q(x)
        kv_hw = hw
        kv_in = x
        if self.sr_ratio > 1:
            if min(hw) < self.sr_ratio:
                raise ValueError(
                    f'AgentAttention: a {hw[0]}x{hw[1]} map is smaller than its '
                    f'{self.sr_ratio}x{self.sr_ratio} spatial reduction (sr_ratio); the input '
                    'image is too small for this stage, resize or pad it')
            kv_in, kv_hw = map_to_tokens(self.sr(tokens_to_map(x, hw)))
            kv_in = self.norm(kv_in)
        k, v = split_heads(self.kv(kv_in), 2 * heads).chunk(2, dim=1)
        agents, _ = map_to_tokens(adaptive_avg_pool2d(tokens_to_map(q, hw), self.agent_shape))
        agents = split_heads(agents, heads)

        # step 1: agents aggregate the values; bias (heads, agents, keys)
        bias_ak = self._resized_bias(
            (self.an_bias, (self.ah_bias + self.aw_bias).squeeze(0)), kv_hw).transpose(1, 2)
        agent_v = F.scaled_dot_product_attention(
            agents, k, v, attn_mask=bias_ak.to(q.dtype), scale=self.scale, dropout_p=drop)
        # step 2: every query reads the agents; bias (heads, queries, agents)
        bias_qa = self._resized_bias(
            (self.na_bias, (self.ha_bias + self.wa_bias).squeeze(0).permute(0, 3, 1, 2)), hw)
        out = F.scaled_dot_product_attention(
            split_heads(q, heads), agents, agent_v, attn_mask=bias_qa.to(q.dtype),
            scale=self.scale, dropout_p=drop)

        v_map = tokens_to_map(merge_heads(v), kv_hw)
        if self.sr_ratio > 1:
            v_map = _bilinear(v_map, hw)
        out = merge_heads(out) + map_to_tokens(self.dwc(v_map))[0]
        return self.proj(out)

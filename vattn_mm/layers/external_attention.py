"""External attention (EANet, "Beyond Self-attention: External Attention
using Two Linear Layers for Visual Tasks", Guo et al., arXiv:2105.02358)."""
from __future__ import annotations

from typing import Mapping, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from .attention import check_heads
from .bricks import build_norm
from .builder import register_mixer
from .tokens import Size, map_to_tokens, tokens_to_map

#: memory slots of both official modules (EAMLP: ``256 // coef``, seg: 64)
OFFICIAL_SLOTS = 64
#: channel expansion of the official multi-head module (EAMLP ``coef``)
OFFICIAL_EXPANSION = 4
#: official key prefix -> ours, per official form
_OFFICIAL_PREFIXES = {
    'multi_head': {'trans_dims.': 'in_proj.', 'linear_0.': 'memory_k.',
                   'linear_1.': 'memory_v.', 'proj.': 'proj.'},
    'seg': {'conv1.': 'in_proj.', 'conv2.0.': 'proj.', 'conv2.1.': 'norm.'},
}
#: official biases that never reach the output (see :class:`ExternalAttention`)
_CANCELLED_BIASES = ('trans_dims.bias', 'conv1.bias', 'linear_0.bias')


@register_mixer
class ExternalAttention(nn.Module):
    """Tokens attend to ``num_slots`` learned memory slots shared by all
    inputs instead of to each other.

    ``in_proj`` (no bias) maps C to ``expansion * C`` channels, split into
    ``expansion * num_heads`` heads of ``C // num_heads`` channels.  Per
    head, ``memory_k`` (a bias-free Linear ``head_dims -> num_slots`` shared
    by the heads) gives slot logits; they are normalised twice: a softmax
    over the TOKENS (each slot distributes over the map), then each token's
    slot weights are divided by their sum (``eps`` + l1 over the slots).
    ``memory_v`` (``num_slots -> head_dims``; with ``tie_memories`` the
    transposed ``memory_k`` weight) reads the slots back, the heads are
    concatenated and ``proj`` maps them to C, followed by ``norm`` if
    ``norm_cfg`` is given.  The softmax runs over the query axis, so this is
    not a key-softmax attention that ``scaled_dot_product_attention`` could
    compute; it is two matrix products.

    The official modules' ``in_proj`` and ``memory_k`` biases are left out:
    they shift each slot's logit by the same amount for every token, which
    the softmax over tokens cancels, so they never change the output (and
    get zero gradients).

    Cost: ``O(N * expansion * C * num_slots)`` time and an
    ``N x heads x num_slots`` weight tensor, linear in the tokens N.  Every
    map size works and nothing is padded (padded tokens would take part in
    the softmax over tokens).

    Official forms (:meth:`from_official` converts both):

    * EAMLP's multi-head ``Attention``: the defaults (``expansion`` 4, 64
      slots, ``memory_v`` and ``proj`` biases, no norm).
    * The segmentation head's ``External_attention(c)``:
      ``expansion=1, num_heads=1, memory_bias=False, proj_bias=False,
      tie_memories=True, norm_cfg=dict(type='BN')`` (its 1x1 convs are the
      Linear layers here).  Its ``linear_1.weight`` is created as a view of
      ``linear_0.weight``, so the two share storage for the module's whole
      life: one memory, updated by both gradients, and loading a state dict
      leaves ``linear_0 = linear_1^T`` (``linear_1`` is copied last).
      The official module also adds its input and applies a ReLU:
      ``relu(x + mixer(x))``; in a pre-norm block the block's residual takes
      that role, so the mixer returns the branch only.

    Args:
        embed_dims: token channels C.
        num_heads: heads before the expansion; C must be divisible by it.
        expansion: ``in_proj`` widens C by this factor (EAMLP ``coef``); it
            also multiplies the heads, so ``head_dims = C // num_heads``.
        num_slots: memory size S (official: 64, fixed).
        memory_bias: bias of ``memory_v``.
        tie_memories: one memory: ``memory_v`` is ``memory_k``'s transposed
            weight (needs ``memory_bias=False``).
        proj_bias: bias of ``proj``.
        norm_cfg: norm after ``proj`` (None: none).  Batch norms (``BN``,
            ``SyncBN``) normalise the (B, C, H, W) map view, other norms
            (``LN``) the tokens.
        attn_drop: dropout on the normalised slot weights (training only).
        proj_drop: dropout on the output (training only).
        eps: added to the l1 sums over slots (official 1e-9).
    """

    scaling = 'linear'

    def __init__(self, embed_dims: int, num_heads: int = 1,
                 expansion: int = OFFICIAL_EXPANSION, num_slots: int = OFFICIAL_SLOTS,
                 memory_bias: bool = True, proj_bias: bool = True, tie_memories: bool = False,
                 norm_cfg: Optional[dict] = None, attn_drop: float = 0., proj_drop: float = 0.,
                 eps: float = 1e-9):
        super().__init__()
        check_heads(type(self).__name__, embed_dims, num_heads)
        if not isinstance(expansion, int) or expansion < 1:
            raise ValueError(f'ExternalAttention: expansion must be an integer >= 1, '
                             f'got {expansion!r}')
        if num_slots < 1:
            raise ValueError(f'ExternalAttention: num_slots must be >= 1, got {num_slots}')
        for name, p in (('attn_drop', attn_drop), ('proj_drop', proj_drop)):
            if not 0. <= p < 1.:
                raise ValueError(f'ExternalAttention: {name} must be in [0, 1), got {p}')
        if tie_memories and memory_bias:
            raise ValueError('ExternalAttention: tie_memories=True shares one weight between '
                             'the memories and needs memory_bias=False')
        self.heads = expansion * num_heads
        self.head_dims = embed_dims // num_heads
        self.eps = eps
        inner = expansion * embed_dims
        self.in_proj = nn.Linear(embed_dims, inner, bias=False)
        self.memory_k = nn.Linear(self.head_dims, num_slots, bias=False)
        self.memory_v = None if tie_memories else nn.Linear(num_slots, self.head_dims,
                                                            bias=memory_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(inner, embed_dims, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)
        self.norm = build_norm(norm_cfg, embed_dims) if norm_cfg else None

    def slot_weights(self, x: torch.Tensor) -> torch.Tensor:
        """Doubly normalised weights (B, N, heads, S) of the tokens (B, N, C)."""
        b, n, _ = x.shape
        logits = self.memory_k(self.in_proj(x).view(b, n, self.heads, self.head_dims))
        # at least float32 for the normalisation: a slot's softmax over many
        # tokens has entries ~1/N, which half precision would flush
        attn = logits.softmax(dim=1, dtype=torch.promote_types(logits.dtype, torch.float32))
        attn = attn / (self.eps + attn.sum(dim=-1, keepdim=True))
        return attn.to(logits.dtype)

    def read_slots(self, attn: torch.Tensor) -> torch.Tensor:
        """Slot weights (B, N, heads, S) -> (B, N, heads, head_dims)."""
        if self.memory_v is None:
            return F.linear(attn, self.memory_k.weight.t())
        return self.memory_v(attn)

    def forward(self, x: torch.Tensor, hw: Size) -> torch.Tensor:
        b, n, _ = x.shape
        out = self.read_slots(self.attn_drop(self.slot_weights(x)))
        out = self.proj_drop(self.proj(out.reshape(b, n, self.heads * self.head_dims)))
        if self.norm is None:
            return out
        if isinstance(self.norm, _BatchNorm):
            return map_to_tokens(self.norm(tokens_to_map(out, hw)))[0]
        return self.norm(out)

    # ------------------------------------------------------------ official weights
    @staticmethod
    def official_form(official_sd: Mapping[str, torch.Tensor]) -> str:
        """``'multi_head'`` (EAMLP ``Attention``) or ``'seg'`` (EANet
        ``External_attention``), read from the state dict's keys."""
        if 'trans_dims.weight' in official_sd:
            return 'multi_head'
        if 'conv1.weight' in official_sd:
            return 'seg'
        raise KeyError('not an official EANet external-attention state dict: expected '
                       '"trans_dims.weight" (EAMLP Attention) or "conv1.weight" '
                       f'(External_attention), got keys {sorted(official_sd)}')

    @classmethod
    def convert_official_state_dict(cls, official_sd: Mapping[str, torch.Tensor]
                                    ) -> dict[str, torch.Tensor]:
        """Our state dict from an official module's: keys renamed, the seg
        module's 1x1 Conv1d / Conv2d kernels flattened to Linear weights, its
        tied memory taken from ``linear_1`` (what the official module holds
        after loading: ``linear_0``'s entry is overwritten), and the biases
        the softmax over tokens cancels (``trans_dims`` / ``conv1`` and
        ``linear_0`` biases) dropped."""
        form = cls.official_form(official_sd)
        prefixes = _OFFICIAL_PREFIXES[form]
        ours = {}
        official_sd = {k: v for k, v in official_sd.items() if k not in _CANCELLED_BIASES}
        if form == 'seg':
            for key in ('linear_0.weight', 'linear_1.weight'):
                if key not in official_sd:
                    raise KeyError(f'official External_attention state dict lacks {key!r}')
            del official_sd['linear_0.weight']
            ours['memory_k.weight'] = official_sd.pop('linear_1.weight').flatten(1).t()
        for key, value in official_sd.items():
            prefix = next((p for p in prefixes if key.startswith(p)), None)
            if prefix is None:
                raise KeyError(f'unexpected key {key!r} in an official external-attention '
                               f'state dict (known prefixes: {sorted(prefixes)})')
            new = prefixes[prefix] + key[len(prefix):]
            if new.endswith('.weight') and not new.startswith('norm.') and value.dim() > 2:
                value = value.flatten(1)  # (out, in, 1[, 1]) -> (out, in)
            ours[new] = value
        return ours

    @classmethod
    def from_official(cls, official_sd: Mapping[str, torch.Tensor], **official_args
                      ) -> 'ExternalAttention':
        """Our module with an official module's weights, built from the
        official constructor arguments: ``dim, num_heads, attn_drop,
        proj_drop`` (and the unused ``qkv_bias, qk_scale``) for EAMLP's
        ``Attention``, ``c`` for ``External_attention`` (whose BN becomes
        ``norm_cfg=dict(type='BN')``; its residual and ReLU stay outside)."""
        form = cls.official_form(official_sd)
        args = dict(official_args)
        needed = 'dim' if form == 'multi_head' else 'c'
        if needed not in args:
            raise TypeError(f'ExternalAttention.from_official: the official {form} module '
                            f'needs its constructor argument {needed!r}')
        if form == 'multi_head':
            dims, heads = args.pop('dim'), args.pop('num_heads', 8)
            kwargs = dict(embed_dims=dims, num_heads=heads, attn_drop=args.pop('attn_drop', 0.),
                          proj_drop=args.pop('proj_drop', 0.))
            for unused in ('qkv_bias', 'qk_scale'):
                args.pop(unused, None)
        else:
            kwargs = dict(embed_dims=args.pop('c'), num_heads=1, expansion=1,
                          memory_bias=False, proj_bias=False, tie_memories=True,
                          norm_cfg=dict(type='BN'))
        if args:
            raise TypeError(f'ExternalAttention.from_official: unknown official {form} '
                            f'arguments {sorted(args)}')
        module = cls(**kwargs)
        module.load_state_dict(cls.convert_official_state_dict(official_sd))
        return module


class ExternalAttentionUnit(nn.Module):
    """EANet's segmentation unit on a (B, C, H, W) map (Guo et al.,
    arXiv:2105.02358; official ``External_attention(c)``):
    ``relu(x + norm(proj(EA(in_proj(x)))))``, one head, one memory of
    ``num_slots`` slots used for reading in and (transposed) out, the
    double normalisation of :class:`ExternalAttention`.

    The memory is ONE parameter (``attention.memory_k.weight``), as in the
    official module whose ``linear_1.weight`` is a view of
    ``linear_0.weight``: both uses add to its gradient and a state dict has
    one entry for it.

    Args:
        channels: map channels C (input = output).
        num_slots: memory slots (official 64).
        norm_cfg: norm after the output projection (official BN; None: none).
        eps: added to the l1 sums over slots (official 1e-9).
    """

    def __init__(self, channels: int, num_slots: int = OFFICIAL_SLOTS,
                 norm_cfg: Optional[dict] = dict(type='BN'), eps: float = 1e-9):
        super().__init__()
        self.attention = ExternalAttention(
            channels, num_heads=1, expansion=1, num_slots=num_slots, memory_bias=False,
            proj_bias=False, tie_memories=True, norm_cfg=norm_cfg, eps=eps)

    def init_weights(self) -> None:
        """The official initialisation: every weight ~ N(0, 2 / C) (He,
        fan-out; the shared memory's last draw is ``linear_1``'s, fan-out C),
        norm weights 1 and biases 0."""
        std = (2. / self.attention.proj.out_features) ** 0.5
        for linear in (self.attention.in_proj, self.attention.memory_k, self.attention.proj):
            nn.init.normal_(linear.weight, 0., std)
        norm = self.attention.norm
        if norm is not None and norm.weight is not None:
            nn.init.ones_(norm.weight)
            nn.init.zeros_(norm.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != self.attention.proj.out_features:
            raise ValueError(f'ExternalAttentionUnit: expected a (B, '
                             f'{self.attention.proj.out_features}, H, W) map, got '
                             f'{tuple(x.shape)}')
        tokens, hw = map_to_tokens(x)
        return F.relu(x + tokens_to_map(self.attention(tokens, hw), hw))

    @classmethod
    def from_official(cls, official_sd: Mapping[str, torch.Tensor], c: int
                      ) -> 'ExternalAttentionUnit':
        """The unit with an official ``External_attention(c)`` module's weights."""
        form = ExternalAttention.official_form(official_sd)
        if form != 'seg':
            raise ValueError('ExternalAttentionUnit.from_official: expected the segmentation '
                             f'module External_attention, got the {form} form (EAMLP '
                             'Attention: use ExternalAttention.from_official)')
        unit = cls(c)
        unit.attention.load_state_dict(ExternalAttention.convert_official_state_dict(official_sd))
        return unit

"""P2T: Pyramid Pooling Transformer for Scene Understanding
(Wu et al., TPAMI 2022, arXiv:2106.12011)."""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence, Union

from ..layers import P2T_POOL_RATIOS
from .base import CheckArchs
from .keymap import KeyMap
from .loading import FamilyConverter, StateDict
from .registry import register_backbone
from .token_pyramid import TokenPyramid

_S = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])
_POINTWISE_FFN = re.compile(r'\.mlp\.fc[12]\.weight$')


def squeeze_pointwise_convs(sd: StateDict, model_sd: StateDict, notes: list) -> StateDict:
    """Turn 1x1-conv weights ``(out, in, 1, 1)`` into the ``(out, in)``
    weights of the equivalent ``nn.Linear`` where the model has a Linear."""
    out, count = {}, 0
    for key, value in sd.items():
        target = model_sd.get(key)
        if (target is not None and value.dim() == 4 and target.dim() == 2
                and value.shape[2:] == (1, 1) and value.shape[:2] == target.shape):
            value = value.flatten(1)
            count += 1
        out[key] = value
    if count:
        notes.append(f'Reshaped {count} 1x1-conv FFN weights (official IRB fc1/fc2) '
                     'to the equivalent linear weights.')
    return out




def unsqueeze_pointwise_convs(sd: StateDict, official_shapes: Mapping[str, Sequence[int]],
                              notes: list) -> StateDict:
    """Inverse of :func:`squeeze_pointwise_convs` on official keys: the IRB
    ``mlp.fc1`` / ``mlp.fc2`` weights become 1x1-conv weights again."""
    out, count = {}, 0
    for key, value in sd.items():
        if _POINTWISE_FFN.search(key) and value.dim() == 2:
            value = value[:, :, None, None]
            count += 1
        out[key] = value
    if count:
        notes.append(f'Reshaped {count} linear FFN weights to the official 1x1-conv '
                     'weights (IRB fc1/fc2).')
    return out


@register_backbone
class P2T(TokenPyramid):
    """Pyramid Pooling Transformer backbone: the :class:`TokenPyramid` with
    pyramid-pooling attention (keys / values from several adaptive average
    poolings of the map, each refined by a depthwise 3x3 conv that all blocks
    of the stage share) and inverted-residual FFNs with Hardswish.  Outputs
    are the raw stage tokens (P2T has no output norms).

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'``, ``'large'`` or a dict with
            the official names (``embed_dims``, ``num_heads``, ``mlp_ratios``,
            ``depths`` and optionally ``qkv_bias``, ``pool_ratios`` - one list
            of ratios per stage, default the official hard-coded
            ``[[12, 16, 20, 24], [6, 8, 10, 12], [3, 4, 5, 6], [1, 2, 3, 4]]``).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks (the
            official dense backbones use 0.1 for tiny/small, 0.3 for
            base/large).
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`PyramidBackbone`.

    Any input size works: sizes are read from the convolutions (a side ``s``
    becomes ``ceil(s / 4)``, then is halved with ceiling per stage), as in the
    official classification ``forward_for_fpn``.  A pooled side is
    ``round(side / ratio)`` (banker's rounding, as official) but at least 1,
    so inputs of 64 px or less, where the official code fails on an empty
    pooled map, pool to a global average instead.
    """

    arch_zoo = {
        'tiny': dict(_S, embed_dims=[48, 96, 240, 384], depths=[2, 2, 6, 3]),
        'small': dict(_S, depths=[2, 2, 9, 3]),
        'base': dict(_S, depths=[3, 4, 18, 3]),
        'large': dict(_S, embed_dims=[64, 128, 320, 640], depths=[3, 8, 27, 3]),
    }
    arch_defaults = dict(qkv_bias=True, pool_ratios=P2T_POOL_RATIOS)
    arch_ignored = TokenPyramid.arch_ignored | {'patch_size', 'img_size'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'pool_ratios')
    check_archs = CheckArchs(
        micro=dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 2, 1, 1]),
        micro_size=(96, 96), representative='small')
    #: official keys (yuhuan-wu/P2T ``p2t.py`` / ``detection/p2t.py``):
    #: ``patch_embed{s+1}``, ``d_convs{s+1}.{p}`` (the stage's pooling convs),
    #: ``block{s+1}.{j}`` with ``attn.q.0`` / ``attn.kv.0`` (a Linear inside a
    #: Sequential), ``mlp.fc1`` / ``mlp.conv`` / ``mlp.fc2`` (``fc1`` / ``fc2``
    #: are 1x1 convs with 4-D weights) and the classifier ``head``; no output norms
    converter = FamilyConverter(
        family='p2t',
        keymap=KeyMap((
            ('patch_embed{s+1}.', 'stages.{s}.patch_embed.'),
            ('d_convs{s+1}.', 'stages.{s}.pool_convs.'),
            ('block{s+1}.', 'stages.{s}.blocks.'),
            ('.attn.q.0.', '.attn.q.'),
            ('.attn.kv.0.', '.attn.kv.'),
            ('.mlp.conv.', '.ffn.dwconv.'),
            ('.mlp.', '.ffn.'),
        )),
        classification_only=(r'^head\.', ),
        adapt=squeeze_pointwise_convs,
        adapt_back=unsqueeze_pointwise_convs,
    )

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'small',
                 in_channels: int = 3, drop_path_rate: float = 0.1, **kwargs):
        a = self.parse_arch(arch)[1]
        hswish = dict(type='HSwish')
        super().__init__(
            arch,
            mixer=[dict(type='PyramidPoolingAttention', pool_ratios=ratios,
                        qkv_bias=a['qkv_bias']) for ratios in a['pool_ratios']],
            ffn=dict(type='ConvFFN', act_cfg=hswish, pre_act_cfg=hswish),
            out_norm_cfg=None, in_channels=in_channels, drop_path_rate=drop_path_rate,
            **kwargs)

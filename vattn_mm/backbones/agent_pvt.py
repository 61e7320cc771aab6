"""Agent-PVT: the PVT pyramid with agent attention in every stage ("Agent
Attention: On the Integration of Softmax and Linear Attention", Han et al.,
ECCV 2024, arXiv:2312.08874)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from .base import CheckArchs
from .keymap import KeyMap
from .loading import FamilyConverter
from .registry import register_backbone
from .token_pyramid import TokenPyramid

_PVT = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4],
            agent_num=[9, 16, 49, 49], img_size=224)
#: agent grids of the released detection and segmentation configs
DENSE_AGENT_SHAPES = ((12, 12), (16, 16), (28, 28), (28, 28))


@register_backbone
class AgentPVT(TokenPyramid):
    """Agent-PVT backbone: non-overlapping patch embeddings (4x4, then 2x2)
    with a learned absolute position embedding per stage, and blocks of
    :class:`~vattn_mm.layers.AgentAttention` + GELU MLP; outputs the raw
    stage tokens (no output norms), as the official dense backbone.

    Args:
        arch: ``'tiny'``, ``'small'``, ``'medium'``, ``'large'`` (224 x 224
            ImageNet training), ``'medium_256'`` (256 x 256) or a dict with the
            official names: ``embed_dims``, ``num_heads``, ``mlp_ratios``,
            ``depths``, ``agent_num`` (agents per stage, squares),
            ``img_size`` (the training size the position tables and agent
            biases are stored for) and optionally ``downstream_agent_shapes``
            (agent grid per stage at run time; default the released dense
            configs' 12x12 / 16x16 / 28x28 / 28x28), ``kernel_size`` (3),
            ``scale`` (-0.5), ``qkv_bias`` (True), ``patch_size`` (4),
            ``agent_sr_ratios`` ('1111'), ``attn_type`` (only ``'AAAA'``:
            agent attention in every stage, as all releases).
        agent_shapes: agent grid per stage at run time, replacing the arch's
            ``downstream_agent_shapes`` (e.g. the training grids 3x3 / 4x4 /
            7x7 / 7x7 for small images, where the dense grids hold more agents
            than tokens).
        in_channels: image channels.
        drop_path_rate: stochastic depth, rising linearly over blocks.
        out_indices, frozen_stages, norm_eval, with_cp, init_cfg, fast_paths: see
            :class:`~vattn_mm.backbones.base.PyramidBackbone`.

    Sizes: the grids are floored, as in the official code (``side // 4``,
    then halved with floor per stage: 100 x 150 -> 25x37, 12x18, 6x9, 3x4);
    nothing is padded, so each side must be at least the last output
    stage's stride.  The position tables are resized to every grid that
    differs from the training grid (:class:`~vattn_mm.layers.AbsolutePosEmbed`).
    """

    arch_zoo = {
        'tiny': dict(_PVT, depths=[2, 2, 2, 2]),
        'small': dict(_PVT, depths=[3, 4, 6, 3]),
        'medium': dict(_PVT, depths=[3, 4, 18, 3]),
        'medium_256': dict(_PVT, depths=[3, 4, 18, 3], img_size=256),
        'large': dict(_PVT, depths=[3, 8, 27, 3]),
    }
    arch_defaults = dict(downstream_agent_shapes=DENSE_AGENT_SHAPES, kernel_size=3, scale=-0.5,
                         qkv_bias=True, patch_size=4, agent_sr_ratios='1111', attn_type='AAAA')
    #: ``sr_ratios``: PVT attention of 'B' stages (not supported); the rest
    #: are classification / training settings
    arch_ignored = TokenPyramid.arch_ignored | {'sr_ratios', 'in_chans', 'qk_scale',
                                                'attn_drop_rate'}
    per_stage_keys = ('embed_dims', 'num_heads', 'mlp_ratios', 'agent_num',
                      'downstream_agent_shapes', 'agent_sr_ratios', 'attn_type')
    check_archs = CheckArchs(
        micro=dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 2, 1, 1], agent_num=[4, 9, 16, 16], img_size=64,
                   downstream_agent_shapes=[[3, 3], [4, 4], [5, 5], [5, 5]]),
        representative='small', timed=False)
    converter = FamilyConverter(
        family='agent_pvt',
        keymap=KeyMap((
            ('pos_embed{s+1}', 'stages.{s}.position.pos_embed'),
            ('patch_embed{s+1}.', 'stages.{s}.patch_embed.'),
            ('block{s+1}.', 'stages.{s}.blocks.'),
            ('.mlp.', '.ffn.'),
        )),
        classification_only=(r'^head\.', ),
    )
    official_wrapper = 'model'

    @classmethod
    def family(cls) -> str:
        return 'agent_pvt'

    @classmethod
    def imagenet_settings(cls, arch: Union[str, Mapping[str, Any]],
                          official_sd: Optional[Mapping[str, torch.Tensor]] = None
                          ) -> tuple[dict, dict]:
        """The ImageNet classifier pools the queries to its training agent
        grids (sqrt(agent_num) squared), not to the dense configs' grids; at
        ``img_size`` it then equals the official classification model."""
        agents = cls.parse_arch(arch)[1]['agent_num']
        return {'downstream_agent_shapes': [(math.isqrt(n), ) * 2 for n in agents]}, {}

    def __init__(self, arch: Union[str, Mapping[str, Any]] = 'small',
                 agent_shapes: Optional[Sequence[Sequence[int]]] = None, in_channels: int = 3,
                 drop_path_rate: float = 0.1, **kwargs):
        a = self.parse_arch(arch)[1]
        stages = len(a['depths'])
        if agent_shapes is not None:
            if len(agent_shapes) != stages:
                raise ValueError(f'AgentPVT: agent_shapes has {len(agent_shapes)} entries but '
                                 f'there are {stages} stages')
            a['downstream_agent_shapes'] = [tuple(s) for s in agent_shapes]
        if a['attn_type'] != 'A' * stages:
            raise ValueError(
                f"AgentPVT: attn_type must be {'A' * stages!r} (agent attention in every "
                f"stage, as in all released models), got {a['attn_type']!r}; the plain PVT "
                "attention of 'B' stages is not supported")
        if len(a['agent_sr_ratios']) != stages:
            raise ValueError(f"AgentPVT: agent_sr_ratios {a['agent_sr_ratios']!r} needs one "
                             f'entry per stage ({stages})')
        patch = a['patch_size']
        grid = a['img_size'] // patch
        windows = [grid // 2 ** i for i in range(stages)]
        if min(windows) < 1:
            raise ValueError(f"AgentPVT: img_size {a['img_size']} is too small for "
                             f"{stages} stages (patch_size {patch}, then halved)")
        mixers = [dict(type='AgentAttention', agent_num=int(num), agent_shape=tuple(shape),
                       window=window, sr_ratio=int(sr), kernel_size=a['kernel_size'],
                       scale=a['scale'], qkv_bias=a['qkv_bias'])
                  for num, shape, window, sr in zip(a['agent_num'], a['downstream_agent_shapes'],
                                                    windows, a['agent_sr_ratios'])]
        # official patch embeddings: k = s convs, floor grids, LayerNorm eps 1e-5
        embeds = [dict(type='OverlapPatchEmbed', kernel_size=stride, stride=stride, padding=0)
                  for stride in [patch] + [2] * (stages - 1)]
        super().__init__(
            arch, mixer=mixers, ffn=dict(type='MLP'), patch_embed=embeds,
            position=[dict(type='AbsolutePosEmbed', grid_size=w) for w in windows],
            out_norm_cfg=None, in_channels=in_channels, drop_path_rate=drop_path_rate,
            **kwargs)
        self.arch['downstream_agent_shapes'] = a['downstream_agent_shapes']

    def smallest_input_side(self) -> int:
        """The stride of the last stage run: smaller sides give empty grids."""
        return self.strides[self.out_indices[-1]]

"""The attention zoo's variants (projects/attention_zoo/README.md), by token mixer: the settings
with which each registered mixer goes into the zoo's macro architecture
(:mod:`.variants` builds them), matched to the reference's parameters and
GMACs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

Cfg = Mapping[str, Any]


@dataclass(frozen=True)
class ZooVariant:
    """One zoo variant: the zoo's macro architecture with one mixer in every
    stage.

    Attributes:
        mixer: the mixer's settings over its stage defaults, one dict for
            every stage or a tuple of one dict per stage (without ``type``).
        position: a position-module config of the variant (None: none).
        matched: the settings bring the backbone's parameters and GMACs at
            224x224 within 5 % of the reference's (False: a baseline without
            such a knob, e.g. full attention).
    """

    mixer: Union[Cfg, tuple] = field(default_factory=dict)
    position: Optional[Cfg] = None
    matched: bool = True

    @classmethod
    def per_stage(cls, same: Optional[Cfg] = None, **per_stage: tuple) -> 'ZooVariant':
        """A variant whose settings ``per_stage`` give one value per stage
        (``attn_dims=(32, 64, 480, 896)``), with the settings ``same`` in
        every stage."""
        counts = {len(values) for values in per_stage.values()}
        if len(counts) != 1:
            raise ValueError(f'ZooVariant.per_stage: give every setting one value per stage, '
                             f'got {per_stage}')
        return cls(tuple({**(same or {}), **dict(zip(per_stage, values))}
                         for values in zip(*per_stage.values())))


#: registered mixer type -> ``{variant name: ZooVariant}`` (at least one each)
ZOO_VARIANTS: dict[str, dict[str, ZooVariant]] = {
    'AgentAttention': {'agent': ZooVariant.per_stage(
        sr_ratio=(8, 4, 2, 1), agent_num=(9, 16, 49, 49),
        agent_shape=((3, 3), (4, 4), (7, 7), (7, 7)))},
    'EfficientMultiHeadAttention': {'rest': ZooVariant.per_stage(attn_dims=(32, 64, 480, 896))},
    'ExternalAttention': {'external': ZooVariant.per_stage(dict(num_slots=32),
                                                           expansion=(1, 2, 1, 4))},
    'FocalModulation': {'focal': ZooVariant.per_stage(modulation_dims=(32, 64, 400, 768))},
    'GlobalSelfAttention': {'global': ZooVariant(matched=False)},   # quadratic baseline, no knob
    'HiLoAttention': {'hilo': ZooVariant.per_stage(attn_dims=(32, 64, 480, 896))},
    'LiteMLA': {'litemla': ZooVariant.per_stage(dict(head_dims=16),
                                                heads_ratio=(.25, .25, .75, 1.5))},
    'MultiScaleDilatedAttention': {
        'dilated': ZooVariant.per_stage(attn_dims=(32, 64, 320, 1024))},
    'MultiScalePoolingAttention': {'mvit': ZooVariant.per_stage(stride_kv=(8, 4, 2, 1),
                                                                attn_dims=(32, 64, 320, 896))},
    'PyramidPoolingAttention': {'p2t': ZooVariant.per_stage(attn_dims=(32, 64, 400, 896))},
    'QuadtreeAttention': {'quadtree_b': ZooVariant.per_stage(dict(topks=(8, 8, 8, 8)),
                                                             attn_dims=(32, 64, 320, 640))},
    'ShiftedWindowAttention': {'swin': ZooVariant.per_stage(attn_dims=(32, 64, 320, 1024))},
    'SpatialReductionAttention': {
        'sra': ZooVariant(),   # the zoo's reference
        'sra_linear': ZooVariant.per_stage(dict(linear=True), attn_dims=(32, 64, 480, 768)),
        'sra_peg': ZooVariant(position=dict(type='PEG'))},
}

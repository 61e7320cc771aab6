"""One micro arch per registered backbone (tiny dims, four stages, every
block type) and where its golden fixtures and released key lists are: the
table the contract suite (``test_backbones.py``) runs over."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from torch import nn

from vattn_mm.backbones import backbone_class, registered_backbones


@dataclass(frozen=True)
class BackboneCase:
    #: tiny arch for the fast checks
    micro: dict
    #: constructor arguments besides the arch
    kwargs: dict = field(default_factory=dict)
    #: input size the micro runs at
    size: tuple = (64, 64)
    #: released key list of an arch name (``keys/<name>.txt``), if released
    key_list: Optional[Callable[[str], str]] = None


CASES = {
    'TokenPyramid': BackboneCase(
        dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1]),
        dict(mixer=[dict(type='SpatialReductionAttention'), dict(type='HiLoAttention'),
                    dict(type='PyramidPoolingAttention'), dict(type='FocalModulation')],
             position=dict(type='ConvPosEnc'))),
    'PVTv2': BackboneCase(
        dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1]),
        key_list=lambda arch: f'pvtv2_{arch}'),
    'P2T': BackboneCase(
        dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1]),
        size=(96, 96), key_list=lambda arch: f'p2t_{arch}'),
    'QuadTree': BackboneCase(
        dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 1, 1, 1], sr_ratios=[4, 3, 2, 1]),
        key_list=lambda arch: f'quadtree_B_{arch}'),
    'LITv2': BackboneCase(
        dict(embed_dim=8, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], alpha=0.5,
             local_ws=[0, 0, 2, 1], mlp_ratio=2.),
        key_list=lambda arch: f'litv2_{arch}'),
    'DilateFormer': BackboneCase(
        dict(embed_dim=12, depths=[1, 2, 1, 1], num_heads=[3, 6, 4, 8], mlp_ratio=2.),
        size=(64, 96), key_list=lambda arch: f'dilateformer_{arch}'),
    'FocalNet': BackboneCase(
        dict(embed_dim=8, depths=[1, 1, 2, 1], mlp_ratio=2., focal_levels=[2, 2, 2, 2],
             focal_windows=[3, 3, 3, 3]),
        key_list=lambda arch: f'focalnet_{arch}'),
    'AgentPVT': BackboneCase(
        dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1], agent_num=[4, 9, 16, 16], img_size=64,
             downstream_agent_shapes=[[3, 3], [4, 4], [5, 5], [5, 5]]),
        key_list=lambda arch: f'agent_pvt_{arch}'),
    'EfficientViT': BackboneCase(
        dict(width_list=[8, 16, 24, 32, 48], depth_list=[1, 2, 2, 1, 1], dim=16),
        key_list=lambda arch: f'efficientvit_{arch}'),
}
REGISTERED = sorted(registered_backbones())
assert sorted(CASES) == REGISTERED, f'backbone cases {sorted(CASES)} != registered {REGISTERED}'


def build_micro(name: str, **kwargs) -> nn.Module:
    """The micro ``name`` backbone, initialised, with all four outputs."""
    case = CASES[name]
    model = backbone_class(name)(case.micro, drop_path_rate=0., **{**case.kwargs, **kwargs})
    model.init_weights()
    return model

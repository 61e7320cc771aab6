"""One micro arch per registered backbone (tiny dims, four stages, every
block type), for the tests that run all of them; each family's own tests
define it, PVTv2's is the conv-SR micro of test_pvtv2."""
from mmengine.registry import MODELS
from test_dilateformer import MICRO as DILATEFORMER
from test_focalnet import MICRO as FOCALNET
from test_litv2 import MICRO as LITV2
from test_p2t import MICRO as P2T
from test_quadtree import MICRO as QUADTREE
from torch import nn

import vattn_mm.backbones

MICRO_ARCHS = {
    'PVTv2': dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                  depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1]),
    'P2T': P2T,
    'QuadTree': QUADTREE,
    'LITv2': LITV2,
    'DilateFormer': DILATEFORMER,
    'FocalNet': FOCALNET,
}
REGISTERED = sorted(set(vattn_mm.backbones.__all__) - {'PyramidBackbone', 'PyramidStage',
                                                         'drop_path_schedule'})
assert sorted(MICRO_ARCHS) == REGISTERED, f'micro archs {sorted(MICRO_ARCHS)} != {REGISTERED}'


def build_micro(name: str) -> nn.Module:
    """The micro ``name`` backbone, initialised, with all four outputs."""
    model = MODELS.build(dict(type=name, arch=MICRO_ARCHS[name], drop_path_rate=0.))
    model.init_weights()
    return model

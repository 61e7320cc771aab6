"""Reusable layers: patch embeddings / stems, token mixers, FFNs, blocks."""
from .attention import SpatialReductionAttention, merge_heads, split_heads
from .block import LayerScale, TokenBlock, residual_add
from .conv import DepthwiseConv2d, TokenMapConv2d, is_token_map
from .deformable_merging import BiasedDeformConv2d, DeformableTokenMerging
from .dilated_attention import (GlobalSelfAttention, MultiScaleDilatedAttention,
                                dilated_local_attention)
from .ffn import MLP, ConvFFN
from .focal_modulation import FocalModulation
from .hilo import HiLoAttention
from .patch_embed import (ConvStem, OverlapPatchEmbed, map_to_tokens,
                          tokens_to_map)
from .quadtree_attention import QuadtreeAttention, coarse_to_fine_attention
from .pooling_attention import PyramidPoolingAttention, make_pool_convs, pooled_size

__all__ = [
    'SpatialReductionAttention', 'merge_heads', 'split_heads', 'LayerScale', 'residual_add',
    'TokenBlock', 'DepthwiseConv2d', 'TokenMapConv2d', 'is_token_map', 'ConvFFN', 'ConvStem',
    'OverlapPatchEmbed', 'map_to_tokens', 'tokens_to_map',
    'QuadtreeAttention', 'coarse_to_fine_attention',
    'PyramidPoolingAttention', 'make_pool_convs', 'pooled_size',
    'FocalModulation',
    'HiLoAttention', 'BiasedDeformConv2d', 'DeformableTokenMerging',
    'MLP', 'GlobalSelfAttention', 'MultiScaleDilatedAttention', 'dilated_local_attention',
]

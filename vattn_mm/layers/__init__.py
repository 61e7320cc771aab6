"""Reusable layers: patch embeddings / stems, token mixers, FFNs, blocks."""
from .attention import SpatialReductionAttention, merge_heads, split_heads
from .block import LayerScale, TokenBlock
from .ffn import ConvFFN
from .patch_embed import (ConvStem, OverlapPatchEmbed, map_to_tokens,
                          tokens_to_map)
from .pooling_attention import (PoolingBlock, PyramidPoolingAttention,
                                make_pool_convs, pooled_size)

__all__ = [
    'SpatialReductionAttention', 'merge_heads', 'split_heads', 'LayerScale',
    'TokenBlock', 'ConvFFN', 'ConvStem', 'OverlapPatchEmbed', 'map_to_tokens',
    'tokens_to_map',
    'PoolingBlock', 'PyramidPoolingAttention', 'make_pool_convs', 'pooled_size',
]

"""Reusable layers: token mixers, the block and its FFNs, tokenisers (patch
embeddings / stems) and position terms, and the builders that make them from
configs."""
from ..ops import DepthwiseConv2d, TokenMapConv2d
from .agent_attention import AgentAttention
from .attention import GlobalSelfAttention, merge_heads, split_heads
from .bricks import DropPath, build_activation, build_norm
from .block import MLP, ConvFFN, LayerScale, TokenBlock, apply_position, residual_add
from .builder import (LAYERS, MIXERS, POSITIONS, SCALINGS, TOKENISERS, build_layer, build_mixer,
                      build_position, build_shared, register_layer, register_mixer,
                      register_position, register_tokeniser, registered_class)
from .dilated_attention import MultiScaleDilatedAttention
from .external_attention import ExternalAttention, ExternalAttentionUnit
from .focal_modulation import FocalModulation
from .hilo import HiLoAttention
from .image_to_tokens import CeiTImageToTokens
from .lite_mla import LiteMLA, relu_linear_attention, relu_quadratic_attention
from .mbconv import ConvNormAct, DSConv, EfficientViTClsNeck, MBConv
from .mvit_attention import MultiScalePoolingAttention, rel_pos_table
from .peg import PEG
from .pixel_attention import PixelAttention
from .pooling_attention import (P2T_POOL_RATIOS, PyramidPoolingAttention, make_pool_convs,
                                pooled_size)
from .quadtree_attention import QuadtreeAttention, coarse_to_fine_attention
from .rest_attention import EfficientMultiHeadAttention
from .shifted_window_attention import ShiftedWindowAttention
from .sincos_position import SinCosPosEmbed
from .spatial_reduction_attention import SpatialReductionAttention
from .tokens import (AbsolutePosEmbed, BiasedDeformConv2d, ConvPosEnc, ConvStem,
                     DeformableTokenMerging, NonOverlapPatchEmbed, OverlapPatchEmbed,
                     map_to_tokens, tokens_to_map)

__all__ = [
    'SpatialReductionAttention', 'merge_heads', 'split_heads', 'LayerScale', 'residual_add',
    'TokenBlock', 'MIXERS', 'build_layer', 'build_mixer', 'build_position', 'build_shared',
    'register_mixer', 'registered_class', 'SCALINGS',
    'DepthwiseConv2d', 'TokenMapConv2d',
    'ConvFFN', 'ConvStem', 'NonOverlapPatchEmbed', 'OverlapPatchEmbed', 'map_to_tokens',
    'tokens_to_map', 'QuadtreeAttention', 'coarse_to_fine_attention',
    'P2T_POOL_RATIOS', 'PyramidPoolingAttention', 'make_pool_convs', 'pooled_size',
    'AbsolutePosEmbed', 'ConvPosEnc', 'FocalModulation', 'HiLoAttention', 'BiasedDeformConv2d',
    'DeformableTokenMerging', 'MLP', 'GlobalSelfAttention', 'MultiScaleDilatedAttention',
    'ExternalAttention', 'ExternalAttentionUnit', 'PEG',
    'EfficientMultiHeadAttention', 'MultiScalePoolingAttention', 'rel_pos_table',
    'AgentAttention', 'ShiftedWindowAttention',
    'LiteMLA', 'relu_linear_attention', 'relu_quadratic_attention',
    'ConvNormAct', 'DSConv', 'MBConv', 'EfficientViTClsNeck',
    'POSITIONS', 'TOKENISERS', 'register_position', 'register_tokeniser', 'apply_position',
    'SinCosPosEmbed', 'PixelAttention', 'CeiTImageToTokens',
    'DropPath', 'build_activation', 'build_norm', 'LAYERS', 'register_layer',
]

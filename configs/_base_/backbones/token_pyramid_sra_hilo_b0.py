# A TokenPyramid at PVTv2-b0 widths that mixes two token mixers: spatial-reduction
# attention (PVTv2) in the two high-resolution stages, HiLo attention (LITv2) in the two
# low-resolution ones (docs/token_pyramid.md). No released weights: trained from scratch.
pretrained = None
backbone = dict(
    type='TokenPyramid',
    arch=dict(embed_dims=[32, 64, 160, 256], depths=[2, 2, 2, 2], num_heads=[1, 2, 5, 8],
              mlp_ratios=[8, 8, 4, 4]),
    mixer=[dict(type='SpatialReductionAttention', sr_ratio=8),
           dict(type='SpatialReductionAttention', sr_ratio=4),
           dict(type='HiLoAttention'), dict(type='HiLoAttention')],
    drop_path_rate=0.1, out_indices=(0, 1, 2, 3), init_cfg=None)
backbone_channels = [32, 64, 160, 256]

# What the DilateFormer fragments share: the four stage outputs and two dense-only choices
# (ours): LayerNorm (eps 1e-6) on each output, initialised 1/0 since no ImageNet checkpoint
# has them, and BatchNorm of the stem/downsamplings kept in eval mode (ImageNet statistics,
# affine weights trained) for small per-GPU batches.
backbone = dict(type='DilateFormer', out_indices=(0, 1, 2, 3),
                out_norm_cfg=dict(type='LN', eps=1e-6), norm_eval=True)

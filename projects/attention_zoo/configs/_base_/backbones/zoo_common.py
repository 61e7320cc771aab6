# The attention zoo's macro architecture (projects/attention_zoo/README.md): PVTv2-b1 widths
# 64/128/320/512, depths 2/2/2/2, heads 1/2/5/8, overlapping patch embedding, ConvFFN (ratios
# 8/8/4/4), LayerNorm on each stage output. Each zoo_<variant>.py fragment sets only the token mixer
# (and the PEG variant its position module); no released weights: trained from scratch.
pretrained = None
backbone = dict(
    type='TokenPyramid', arch='b1', ffn=dict(type='ConvFFN'),
    patch_embed=dict(type='OverlapPatchEmbed'), drop_path_rate=0.1, out_indices=(0, 1, 2, 3),
    init_cfg=None)
backbone_channels = [64, 128, 320, 512]

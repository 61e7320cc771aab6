"""DilateFormer (JIAOJIAYUASD/dilateformer ``models/dilateformer.py``) official key layout.

Official -> ours: the stem ``patch_embed.proj.{0,1,3,4,6,7,9}`` becomes
``stages.0.patch_embed.convs.*``; the downsampling at the END of official stage
``i`` (``stages.{i}.downsample.proj.{0,1}``, conv + BN) becomes the patch
embedding at the START of our stage ``i + 1``; ``mlp`` is ``ffn``.  The
classifier's final ``norm`` and ``head`` are dropped; our optional per-stage
output norms are dense-only.
"""
from .keymap import KeyMap
from .loading import FamilyConverter

DILATEFORMER_CONVERTER = FamilyConverter(
    family='dilateformer',
    keymap=KeyMap((
        ('patch_embed.proj.', 'stages.0.patch_embed.convs.'),
        ('stages.{s-1}.downsample.proj.0.', 'stages.{s}.patch_embed.proj.'),
        ('stages.{s-1}.downsample.proj.1.', 'stages.{s}.patch_embed.norm.'),
        ('stages.{s-1}.downsample.pos_embed.', 'stages.{s}.patch_embed.pos_embed.'),
        ('.mlp.', '.ffn.'),
    )),
    classification_only=(r'^norm\.', r'^head\.'),
    dense_only=(r'^stages\.\d+\.norm\.', ),
)

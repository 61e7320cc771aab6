"""LITv2 (ziplab/LITv2 ``classification/models/litv2.py`` checkpoints, dense
``detection/mmdet/models/backbones/litv2.py``) official key layout.

Official ``layers.{i}.downsample`` (DTM at the END of stage ``i``) is our
``stages.{i+1}.patch_embed``; the stem ``patch_embed`` is ``stages.0.patch_embed``.
"""
from .keymap import KeyMap
from .loading import FamilyConverter

LITV2_CONVERTER = FamilyConverter(
    family='litv2',
    keymap=KeyMap((
        ('patch_embed.', 'stages.0.patch_embed.'),
        ('layers.{s}.downsample.norm_layer.', 'stages.{s+1}.patch_embed.norm.'),
        ('layers.{s}.downsample.', 'stages.{s+1}.patch_embed.'),
        ('layers.{s}.blocks.', 'stages.{s}.blocks.'),
        ('.mlp.dwconv.dwconv.', '.ffn.dwconv.'),
        ('.mlp.', '.ffn.'),
    )),
    # the classifier's final norm and head
    classification_only=(r'^norm\.', r'^head\.'),
    # per-output norms of the dense backbone (official det: norm1..norm3)
    dense_only=(r'^stages\.\d+\.norm\.', ),
)

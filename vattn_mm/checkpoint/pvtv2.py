"""PVTv2 (whai362/PVT ``pvt_v2.py``) official key layout."""
from .keymap import KeyMap
from .loading import FamilyConverter

# Shared by the PVT-style families (PVTv2, QuadTree): numbered stage modules.
PVT_STAGE_RULES = (
    ('patch_embed{s+1}.', 'stages.{s}.patch_embed.'),
    ('block{s+1}.', 'stages.{s}.blocks.'),
    ('norm{s+1}.', 'stages.{s}.norm.'),
    ('.mlp.dwconv.dwconv.', '.ffn.dwconv.'),
    ('.mlp.', '.ffn.'),
)

PVTV2_CONVERTER = FamilyConverter(
    family='pvtv2',
    keymap=KeyMap(PVT_STAGE_RULES),
    classification_only=(r'^head\.', ),
)

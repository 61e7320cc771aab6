"""QuadTree (Tangshitao/QuadTreeAttention ``classification/quadtree.py``,
``detection/quadtree.py``) official key layout: the PVTv2 tree with the
quadtree attention's nested ``py_att`` module flattened."""
from .keymap import KeyMap
from .loading import FamilyConverter
from .pvtv2 import PVT_STAGE_RULES

QUADTREE_ATTN_RULES = (
    ('.attn.py_att.weight', '.attn.level_logits'),
    ('.attn.py_att.get_vs.', '.attn.lepe_convs.'),
    ('.attn.value_branchs.', '.attn.value_downsamples.'),
)

QUADTREE_CONVERTER = FamilyConverter(
    family='quadtree',
    keymap=KeyMap(PVT_STAGE_RULES + QUADTREE_ATTN_RULES),
    classification_only=(r'^head\.', ),
)

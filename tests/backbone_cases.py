"""The registered backbones at the micro arch each declares
(``check_archs``, :class:`~vattn_mm.backbones.CheckArchs`), and where their
released key lists are: what the contract suite (``test_backbones.py``)
runs over."""
from __future__ import annotations

from torch import nn

from vattn_mm.backbones import backbone_class, registered_backbones

REGISTERED = sorted(registered_backbones())
#: registered name -> the architectures the backbone declares for the checks
CASES = {name: backbone_class(name).check_archs for name in REGISTERED}
#: released key lists (``keys/<name>.txt``) not named ``<family>_<arch>``
_KEY_LIST_NAMES = {'QuadTree': 'quadtree_B_{arch}'}


def key_list(name: str, arch: str) -> str:
    """The released key list of backbone ``name``'s arch ``arch``."""
    return _KEY_LIST_NAMES.get(name, '{family}_{arch}').format(
        family=backbone_class(name).family(), arch=arch)


def build_micro(name: str, **kwargs) -> nn.Module:
    """The micro ``name`` backbone, initialised, with all four outputs."""
    case = CASES[name]
    model = backbone_class(name)(case.micro, drop_path_rate=0.,
                                 **{**case.micro_kwargs, **kwargs})
    model.init_weights()
    return model

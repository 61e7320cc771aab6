"""The OpenMMLab packages a task needs, imported only where it needs them.

``import vattn_mm`` needs torch; where mmengine is installed, mmcv too (with
or without compiled ops); mmdet, mmsegmentation and mmpretrain are imported by what uses them, and
a missing one is an error that names the install extra that brings it
(``pip install 'vattn-mm[det]'``).  mmdet and mmseg import mmcv's compiled ops
(``mmcv.ops``): with mmcv built without them (``mmcv-lite``,
``MMCV_WITH_OPS=0``) the error says so.

:func:`check_stack` checks the versions of torch, mmengine and mmcv when the
package is imported (torch alone where mmengine is not installed), like mmdet and mmseg do, since vattn-mm's install does
not pull them (it never replaces the torch or mmcv of an environment).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from .compat import MIN_TORCH, TORCH_VERSION

#: import name -> (distribution on PyPI, vattn-mm extra that installs it)
PACKAGES = {
    'mmdet': ('mmdet', 'det'),
    'mmseg': ('mmsegmentation', 'seg'),
    'mmpretrain': ('mmpretrain', 'cls'),
}
#: the config ``default_scope`` of each downstream codebase -> its import name
SCOPES = {'mmdet': 'mmdet', 'mmseg': 'mmseg', 'mmpretrain': 'mmpretrain'}
#: supported releases, [lower, upper) as (major, minor); docs/install.md says why
MMENGINE_RANGE = ((0, 10), (1, 0))
MMCV_RANGE = ((2, 0), (2, 2))


class MissingPackageError(ImportError):
    """An OpenMMLab package a task needs is not installed or cannot import."""


def _release(text: str) -> tuple[int, int]:
    major, minor = text.split('.')[:2]
    return int(major), int(''.join(c for c in minor if c.isdigit()) or 0)


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def has_mmcv_ops() -> bool:
    """Whether mmcv's compiled ops import (mmcv built with ``MMCV_WITH_OPS=1``)."""
    return _imports('mmcv.ops')


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (``'mmdet.models'``, ...) for ``what`` (a sentence
    subject: ``'EAHead'``, ``'this config'``); a clear error naming the extra
    to install, or mmcv's missing ops, otherwise."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split('.')[0]
        dist, extra = PACKAGES.get(top, (top, 'all'))
        if top in ('mmdet', 'mmseg') and _imports(top) and not has_mmcv_ops():
            raise MissingPackageError(
                f"{what} needs {dist}, which needs mmcv's compiled ops (mmcv.ops), and this "
                "mmcv has none (mmcv-lite or built with MMCV_WITH_OPS=0): install mmcv with "
                "ops, e.g. `mim install 'mmcv>=2.0.0,<2.2.0'` (docs/install.md)") from err
        raise MissingPackageError(
            f"{what} needs {dist} ({module} does not import: {err}); install it with "
            f"`pip install 'vattn-mm[{extra}]'` (docs/install.md)") from err


def require_config_scope(cfg) -> None:
    """Import the codebase a config's ``default_scope`` names (its models
    register there); a clear error naming the extra if it is missing."""
    scope = cfg.get('default_scope')
    if scope in SCOPES:
        require(f'{SCOPES[scope]}.models', f'this config (default_scope={scope!r})')


def check_stack() -> None:
    """torch, mmengine and mmcv within the supported releases; a clear error
    naming the fix otherwise."""
    check_torch()
    check_openmmlab()


def check_torch() -> None:
    """torch within the supported releases, or an error naming the release found."""
    import torch
    if TORCH_VERSION < MIN_TORCH:
        raise ImportError(f'vattn-mm needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}, '
                          f'found {torch.__version__}')


def uses_openmmlab() -> bool:
    """Whether MMEngine is installed (and not blocked in ``sys.modules``): then
    ``import vattn_mm`` registers in its registries and needs mmcv too."""
    if 'mmengine' in sys.modules:
        return sys.modules['mmengine'] is not None
    return importlib.util.find_spec('mmengine') is not None


def check_openmmlab() -> None:
    """mmengine and mmcv within the supported releases; a clear error naming
    the fix otherwise."""
    for name, (low, high), dists in (('mmengine', MMENGINE_RANGE, ('mmengine', 'mmengine-lite')),
                                     ('mmcv', MMCV_RANGE, ('mmcv', 'mmcv-lite', 'mmcv-full'))):
        try:
            module = importlib.import_module(name)
        except ImportError as err:
            raise ImportError(
                f"vattn-mm needs {name} >= {low[0]}.{low[1]}, < {high[0]}.{high[1]}, which does "
                f"not import ({err}): `pip install -U openmim && mim install '{name}>="
                f"{low[0]}.{low[1]}.0,<{high[0]}.{high[1]}.0'` (docs/install.md)") from err
        found = getattr(module, '__version__', None) or _dist_version(dists)
        if found and not low <= _release(found) < high:
            raise ImportError(f'vattn-mm needs {name} >= {low[0]}.{low[1]}, < {high[0]}.'
                              f'{high[1]}, found {found} (docs/install.md)')


def _dist_version(dists: tuple[str, ...]):
    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None

"""Switching vattn-mm's protections (docs/reliability.md) on in a run's
config: the entries of the runtime fragment a config lacks, and the exact
checkpoint check of evaluation runs."""
from __future__ import annotations

import os.path as osp
from pathlib import Path

from mmengine.config import Config
from mmengine.logging import print_log

_PACKAGE = Path(__file__).resolve().parents[1]
#: the config fragment that switches vattn-mm's protections on (docs/reliability.md): in a
#: checkout beside the package, in an installed wheel under the package's ``.mim/configs``
#: (where ``mim`` finds configs)
RUNTIME_FRAGMENT = str(next(
    (path for path in (root / 'configs/_base_/vattn_runtime.py'
                       for root in (_PACKAGE.parent, _PACKAGE / '.mim')) if path.is_file()),
    _PACKAGE.parent / 'configs/_base_/vattn_runtime.py'))


def use_protections(cfg: Config, fragment: str = RUNTIME_FRAGMENT) -> list[str]:
    """Give ``cfg`` the entries of ``fragment`` it lacks (a config that does not
    inherit configs/_base_/vattn_runtime.py gets its ``runner_type`` and the
    rest); returns their names.  Entries the config has, e.g. another
    ``runner_type``, are kept."""
    if not osp.isfile(fragment):
        raise FileNotFoundError(f'runtime config fragment not found: {fragment}')
    runtime = Config.fromfile(fragment, import_custom_modules=False)
    added = [key for key in runtime.keys() if key not in cfg]
    if added:
        cfg.merge_from_dict({key: runtime[key] for key in added})
        print_log(f'Entries of {fragment} added to the config: '
                  + ', '.join(f'{key}={runtime[key]!r}' for key in added), logger='current')
    return added


def require_exact_checkpoint(cfg: Config) -> None:
    """Make ``cfg.load_from`` fail unless it fits the model exactly
    (:class:`~vattn_mm.engine.ExactCheckpointHook`)."""
    hooks = list(cfg.get('custom_hooks', []))
    if not any(h.get('type') == 'ExactCheckpointHook' for h in hooks):
        hooks.append(dict(type='ExactCheckpointHook'))
    cfg.custom_hooks = hooks

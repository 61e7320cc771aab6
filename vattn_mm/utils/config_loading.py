"""Reading a run's config for ``tools/train.py`` and ``tools/test.py``: one
loader for mmdet, mmseg and mmpretrain configs, with a clear error naming
the extra to install where a codebase the config needs is missing."""
from __future__ import annotations

import os.path as osp
import re
from typing import Optional

from mmengine.config import Config

from .requires import SCOPES, require, require_config_scope


def load_config(path: str, cfg_options: Optional[dict] = None,
                work_dir: Optional[str] = None, launcher: str = 'none') -> Config:
    """Read ``path``, check that the codebase its ``default_scope`` names
    imports (a clear error naming the extra to install otherwise), apply
    ``--cfg-options`` and set the work dir (default
    ``work_dirs/<config name>``) and the launcher."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'config file not found: {path}')
    try:
        cfg = Config.fromfile(path)
    except ModuleNotFoundError as err:
        base = re.search(r'(\w+) is not installed', str(err))   # mmengine: a `package::` base
        module = base and {**SCOPES, 'mmsegmentation': 'mmseg'}.get(base.group(1))
        if module:
            require(module, f'{path} (its bases come from {module})')
        if err.name != 'pkg_resources':
            raise
        raise ModuleNotFoundError(
            f"{path}: mmengine reads `package::` config bases with pkg_resources, which this "
            "environment lacks (Python >= 3.12 venvs have no setuptools): "
            "`pip install 'setuptools<81'`", name=err.name) from err
    require_config_scope(cfg)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(path))[0])
    cfg.launcher = launcher
    return cfg

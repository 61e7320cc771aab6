"""``tools/test.py --show-dir``: saving visualised predictions with the
visualization hook of the config's codebase."""
from __future__ import annotations

from mmengine.config import Config

#: the visualization hook each upstream scope's schedule bases add
_VISUALIZATION_HOOKS = {'mmdet': 'DetVisualizationHook', 'mmseg': 'SegVisualizationHook',
                        'mmpretrain': 'VisualizationHook'}


def enable_visualization(cfg: Config, show_dir: str) -> None:
    """Save visualised predictions under ``<work_dir>/<timestamp>/<show_dir>``
    (mmdet / mmpretrain hooks) or ``<show_dir>`` (mmseg's visualizer)."""
    hooks = cfg.setdefault('default_hooks', {})
    hook = hooks.get('visualization')
    if hook is None:  # e.g. a config without the upstream schedule bases, which define it
        scope = cfg.get('default_scope')
        if scope not in _VISUALIZATION_HOOKS:
            raise ValueError('--show-dir needs a `visualization` hook in default_hooks (or a '
                             f'default_scope among {sorted(_VISUALIZATION_HOOKS)})')
        hooks['visualization'] = dict(type=_VISUALIZATION_HOOKS[scope])
        hook = hooks['visualization']  # the config's own copy
    hook['interval'] = 1
    if hook.get('type') == 'VisualizationHook':  # mmpretrain
        hook.update(enable=True, out_dir=show_dir)
    elif hook.get('type') == 'SegVisualizationHook':
        hook['draw'] = True
        cfg.visualizer['save_dir'] = show_dir
    else:  # mmdet
        hook.update(draw=True, test_out_dir=show_dir)

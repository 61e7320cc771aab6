"""Config preparation shared by ``tools/train.py`` and ``tools/test.py``: one
set of tools for mmdet, mmseg and mmpretrain configs, on GPU or CPU."""
from __future__ import annotations

import atexit
import os
import os.path as osp
import re
import sys
import threading
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, NoReturn, Optional

import torch
import torch.distributed as dist
from mmengine._strategy import FSDPStrategy
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log
from mmengine.registry import STRATEGIES

from .requires import SCOPES, require, require_config_scope


_PACKAGE = Path(__file__).resolve().parents[1]
#: the config fragment that switches vattn-mm's protections on (docs/reliability.md): in a
#: checkout beside the package, in an installed wheel under the package's ``.mim/configs``
#: (where ``mim`` finds configs)
RUNTIME_FRAGMENT = str(next(
    (path for path in (root / 'configs/_base_/vattn_runtime.py'
                       for root in (_PACKAGE.parent, _PACKAGE / '.mim')) if path.is_file()),
    _PACKAGE.parent / 'configs/_base_/vattn_runtime.py'))


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


def replace_sync_bn(node: Any) -> int:
    """SyncBN -> BN in a config tree (SyncBatchNorm has no CPU kernel)."""
    count = 0
    if isinstance(node, dict):
        if node.get('type') == 'SyncBN':
            node['type'] = 'BN'
            count += 1
        for value in node.values():
            count += replace_sync_bn(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            count += replace_sync_bn(value)
    return count


def is_fsdp(strategy: Optional[dict]) -> bool:
    """Whether a FlexibleRunner ``strategy`` config is mmengine's
    ``FSDPStrategy`` or a subclass of it."""
    if not strategy:
        return False
    kind = strategy.get('type')
    kind = STRATEGIES.get(kind) if isinstance(kind, str) else kind
    return isinstance(kind, type) and issubclass(kind, FSDPStrategy)


def cpu_strategy(strategy: ConfigDict) -> None:
    """Point a FlexibleRunner ``strategy`` at the CPU: mmengine's
    ``FSDPStrategy`` / ``DDPStrategy`` give the model wrapper the GPU
    ``LOCAL_RANK`` by default."""
    kind = strategy.get('type')
    wrapper = dict(strategy.get('model_wrapper') or {})
    if is_fsdp(strategy):
        wrapper['device_id'] = 'cpu'
    elif kind == 'DDPStrategy':
        wrapper.setdefault('type', 'MMDistributedDataParallel')
        wrapper.setdefault('broadcast_buffers', False)
        wrapper['device_ids'] = None
    else:
        raise ValueError(f'strategy {kind!r} needs CUDA: on the CPU only FSDPStrategy (and '
                         'its subclasses) and DDPStrategy run distributed')
    strategy.model_wrapper = wrapper


def setup_distributed(cfg: Config) -> None:
    """Initialise the process group and the DDP wrapper for ``cfg.launcher``.

    On GPU nodes MMEngine's defaults (NCCL, one device per process) are kept.
    Without a GPU the backend is gloo, DDP wraps the CPU model without device
    ids (a FlexibleRunner ``strategy``: :func:`cpu_strategy`), and SyncBN
    (CUDA only) becomes BN, said in the log.  On both,
    ``env_cfg.dist_cfg.timeout`` (seconds) bounds every collective: a rank
    that hangs makes the others fail after that time instead of waiting.
    """
    if cfg.launcher == 'none' and is_fsdp(cfg.get('strategy')):
        raise ValueError('FSDPStrategy shards the model over a process group: start the run '
                         'with tools/dist_train.sh CONFIG NUM_PROCESSES (1 is allowed) or '
                         '--launcher pytorch under torchrun')
    if cfg.launcher == 'none' or torch.cuda.is_available():
        return
    cfg.env_cfg = ConfigDict(cfg.get('env_cfg', {}))
    cfg.env_cfg.dist_cfg = dict(cfg.env_cfg.get('dist_cfg', {}), backend='gloo')
    if not dist.is_initialized():
        if 'RANK' not in os.environ:
            raise RuntimeError(f'--launcher {cfg.launcher} needs the torchrun environment '
                               '(RANK, WORLD_SIZE, MASTER_ADDR, ...): use tools/dist_train.sh')
        timeout = cfg.env_cfg.dist_cfg.get('timeout')
        dist.init_process_group(
            backend='gloo',
            **({} if timeout is None else dict(timeout=timedelta(seconds=timeout))))
    strategy = cfg.get('strategy')
    if strategy is None:
        cfg.model_wrapper_cfg = dict(
            type='MMDistributedDataParallel', device_ids=None, broadcast_buffers=False,
            find_unused_parameters=cfg.get('find_unused_parameters', False))
    else:
        cpu_strategy(strategy)
    replaced = replace_sync_bn(cfg.model)
    if replaced:
        print_log(f'CPU distributed run: {replaced} SyncBN layer config(s) use BN instead '
                  '(SyncBatchNorm needs CUDA); statistics are per process.', logger='current')


@contextmanager
def distributed_teardown() -> Iterator[None]:
    """Leave the process group explicitly when a distributed run ends.

    Without it every rank exits while the others may still use the group: the
    rank that hosts the rendezvous store (rank 0) can be gone before another
    rank's gloo threads are destroyed at interpreter exit, which aborts that
    rank (SIGABRT) after a run that succeeded.  On success the ranks meet at a
    barrier, destroy the group and the process ends here
    (:func:`exit_without_finalization`); on failure the group is destroyed
    locally (no collective: the other ranks may be dead or stuck) and the
    error is re-raised.
    """
    try:
        yield
    except BaseException:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        raise
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        exit_without_finalization(0)


def exit_without_finalization(status: int) -> NoReturn:
    """End the process after a finished distributed run, skipping only the
    interpreter's final teardown.

    A collective's worker thread (gloo, NCCL's watchdog) releases the tensors
    of a finished operation after the caller has moved on, and that release
    takes the GIL.  If the interpreter is finalizing by then the thread is
    torn down inside a C++ destructor and the rank aborts (SIGABRT), although
    the run succeeded: PyTorch issue 190489, which ``destroy_process_group``
    does not prevent (the process group outlives it).  Seen here in about one
    of 20 two-process CPU runs on a busy 2-core machine.  So everything an
    exit does that can matter is done with the interpreter intact - other
    non-daemon threads are joined, ``atexit`` handlers run (logging closes its
    files, multiprocessing ends its children), stdout and stderr are flushed -
    and then ``os._exit`` ends the process, as multiprocessing ends its own
    children.
    """
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


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


def require_exact_checkpoint(cfg: Config) -> None:
    """Make ``cfg.load_from`` fail unless it fits the model exactly
    (:class:`~vattn_mm.engine.ExactCheckpointHook`)."""
    hooks = list(cfg.get('custom_hooks', []))
    if not any(h.get('type') == 'ExactCheckpointHook' for h in hooks):
        hooks.append(dict(type='ExactCheckpointHook'))
    cfg.custom_hooks = hooks

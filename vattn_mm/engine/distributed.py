"""Distributed runs on GPU nodes and on CPUs: the process group and the DDP
or strategy wrapper of ``--launcher`` runs, with gloo, CPU wrappers and BN in
place of SyncBN where there is no GPU."""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist
from mmengine._strategy import FSDPStrategy
from mmengine.config import Config, ConfigDict
from mmengine.logging import print_log
from mmengine.registry import STRATEGIES


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

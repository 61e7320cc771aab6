"""Train a model from an mmdet, mmseg or mmpretrain config.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]]
                                 [--amp] [--amp-dtype {float16,bfloat16}]
                                 [--trust-checkpoint FILE] [--cfg-options k=v ...]
                                 [--launcher pytorch]

vattn-mm's protections (docs/reliability.md) are on: a config that does not
inherit configs/_base_/vattn_runtime.py gets the entries it lacks.  Checkpoints
are written atomically; ``--resume`` continues from the last one.
"""
import argparse
import os

import vattn_mm  # noqa: F401  (registers the backbones, SafeRunner and its hooks)
from mmengine.config import DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner
from torch.distributed.elastic.multiprocessing.errors import record

from vattn_mm.engine.distributed import setup_distributed
from vattn_mm.utils import trust_checkpoint
from vattn_mm.utils.config_loading import load_config
from vattn_mm.utils.distributed_exit import distributed_teardown
from vattn_mm.utils.protections import use_protections


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a detector, segmentor or classifier')
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='output folder (default: work_dirs/<config name>)')
    parser.add_argument('--resume', nargs='?', const='auto', default=None,
                        help='resume from CKPT (a file or an http(s) URL), or from the latest '
                             'checkpoint in the work dir')
    parser.add_argument('--amp', action='store_true',
                        help='automatic mixed precision (AmpOptimWrapper, float16 by default)')
    parser.add_argument('--amp-dtype', choices=['float16', 'bfloat16'],
                        help='mixed precision with this dtype (implies --amp)')
    parser.add_argument('--trust-checkpoint', action='append', default=[], metavar='FILE',
                        help='allow full unpickling of this one checkpoint file or URL '
                             '(repeatable); only for files from a trusted source')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate with the total batch size')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries, e.g. train_cfg.max_iters=20')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


@record  # a failing rank's traceback shows in torchrun's summary
def main() -> None:
    args = parse_args()
    for path in args.trust_checkpoint:
        trust_checkpoint(path)
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
    use_protections(cfg)
    if args.amp or args.amp_dtype:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
        if args.amp_dtype:
            cfg.optim_wrapper.dtype = args.amp_dtype
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg:
            raise ValueError('--auto-scale-lr needs `auto_scale_lr` in the config')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    setup_distributed(cfg)
    with distributed_teardown():
        runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
        runner.train()


if __name__ == '__main__':
    main()

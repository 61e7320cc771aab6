"""Evaluate a checkpoint with an mmdet, mmseg or mmpretrain config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR]
                         [--trust-checkpoint] [--cfg-options k=v ...] [--launcher pytorch]

The checkpoint must fit the config's model exactly (a checkpoint of another
family or variant is an error, not an evaluation of random weights).  The
metrics are printed and written to <work_dir>/test_metrics.json, then once
more under the papers' names (box AP, mask AP, mIoU) beside the published
number of the config's official recipe (configs/metafiles/).  vattn-mm's
protections are on as in tools/train.py.
"""
import argparse
import json
import os
import os.path as osp

import vattn_mm  # noqa: F401  (registers the backbones, SafeRunner and its hooks)
from mmengine.config import DictAction
from mmengine.dist import is_main_process
from mmengine.registry import RUNNERS
from mmengine.runner import Runner
from torch.distributed.elastic.multiprocessing.errors import record

from vattn_mm.checkpoint.released import in_paper_terms, record_of_config
from vattn_mm.engine.distributed import setup_distributed
from vattn_mm.utils import atomic_write, is_url, trust_checkpoint
from vattn_mm.utils.config_loading import load_config
from vattn_mm.utils.distributed_exit import distributed_teardown
from vattn_mm.utils.protections import require_exact_checkpoint, use_protections
from vattn_mm.utils.visualization import enable_visualization


def _json_value(value):
    """Metric values as JSON numbers: Python and NumPy scalars (mmseg's
    IoUMetric returns numpy.float32, which json cannot write) and 0-d
    tensors; anything else as its text."""
    if hasattr(value, 'item') and getattr(value, 'ndim', 0) == 0:
        value = value.item()
    return float(value) if isinstance(value, (int, float)) else str(value)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Test a detector, segmentor or classifier')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file or http(s) URL')
    parser.add_argument('--work-dir', help='output folder (default: work_dirs/<config name>)')
    parser.add_argument('--show-dir', help='save visualised predictions in this folder')
    parser.add_argument('--trust-checkpoint', action='store_true',
                        help='allow full unpickling of CHECKPOINT (file or URL; only for a '
                             'trusted source)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config entries')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


@record  # a failing rank's traceback shows in torchrun's summary
def main() -> None:
    args = parse_args()
    if not is_url(args.checkpoint) and not osp.isfile(args.checkpoint):
        raise FileNotFoundError(f'checkpoint not found: {args.checkpoint}')
    if args.trust_checkpoint:
        trust_checkpoint(args.checkpoint)
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
    use_protections(cfg)
    cfg.load_from = args.checkpoint
    require_exact_checkpoint(cfg)
    if args.show_dir:
        enable_visualization(cfg, args.show_dir)
    setup_distributed(cfg)
    with distributed_teardown():
        runner = RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
        metrics = runner.test()
        if is_main_process():
            out = osp.join(cfg.work_dir, 'test_metrics.json')
            atomic_write(out, json.dumps({k: _json_value(v) for k, v in metrics.items()},
                                         indent=2).encode())
            print(f'metrics written to {out}')
            summary = in_paper_terms(metrics, record_of_config(args.config))
            if summary:
                print(f'in the papers\' terms: {summary}')


if __name__ == '__main__':
    main()

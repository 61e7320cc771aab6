"""End to end through the user's tools: demo training + evaluation, and a
user's config trained on the demo data (resume and distributed runs:
test_reliability.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mmengine.config import Config

from vattn_mm.checkpoint.released import PAPER_METRICS

#: slow (demo training and evaluation through tools/train.py and tools/test.py)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DET_DEMO = 'configs/demo/pvtv2_b0_maskrcnn_demo.py'
SEG_DEMO = 'configs/demo/pvtv2_b0_upernet_demo.py'
CLS_DEMO = 'configs/demo/pvtv2_b0_cls_demo.py'


def data_options(root: Path, config: str) -> list:
    if 'maskrcnn' in config:
        coco = f'{root}/coco/'
        return [f'train_dataloader.dataset.data_root={coco}', f'val_dataloader.dataset.data_root={coco}',
                f'test_dataloader.dataset.data_root={coco}',
                f'val_evaluator.ann_file={coco}annotations/instances_val.json',
                f'test_evaluator.ann_file={coco}annotations/instances_val.json']
    ade = f'{root}/ade/'
    return [f'train_dataloader.dataset.data_root={ade}', f'val_dataloader.dataset.data_root={ade}',
            f'test_dataloader.dataset.data_root={ade}']


def run_tool(args: list, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        stderr = without_module_list(proc.stderr)
        raise AssertionError(f'{args} failed:\n{proc.stdout[-3000:]}\n{stderr[-8000:]}')
    return proc


def without_module_list(log: str) -> str:
    """``log`` without the line on which a crashing interpreter lists its ~100
    extension modules, so that a failure's excerpt keeps the error above it."""
    return '\n'.join(line for line in log.splitlines()
                     if not line.startswith('Extension modules:'))


def train(config, work_dir, root, iters):
    opts = data_options(root, config) + [
        f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
        'default_hooks.checkpoint.interval=2', 'default_hooks.logger.interval=1',
        'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'val_dataloader.num_workers=0',
        'val_dataloader.persistent_workers=False', 'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False']
    return run_tool([sys.executable, 'tools/train.py', config, '--work-dir', str(work_dir),
                     '--cfg-options', *opts])


@pytest.mark.parametrize('config,metric,images', [
    (DET_DEMO, 'coco/bbox_mAP', '*.jpg'), (SEG_DEMO, 'mIoU', '*.png')])
def test_demo_train_evaluate_and_visualise(demo_trained, demo_data, tmp_path, config, metric,
                                           images):
    """What `make demo` runs for each demo: train (the session's shared run,
    ``demo_trained``), then tools/test.py with --show-dir (the seg demo's
    config has no visualization hook of its own)."""
    ckpt = (demo_trained(config) / 'last_checkpoint').read_text().strip()
    assert ckpt.endswith('iter_2.pth')
    work, vis = tmp_path / 'run', tmp_path / 'vis'
    printed = run_tool([sys.executable, 'tools/test.py', config, ckpt, '--work-dir', str(work),
                        '--show-dir', str(vis), '--cfg-options', *data_options(demo_data, config),
                        'test_dataloader.num_workers=0',
                        'test_dataloader.persistent_workers=False']).stdout
    metrics = json.loads((work / 'test_metrics.json').read_text())
    assert isinstance(metrics[metric], float)
    name, factor = PAPER_METRICS[metric]
    assert f"in the papers' terms: {name} {metrics[metric] * factor:.1f}" in printed
    assert len(list(vis.rglob(images))) == 4
    table = run_tool([sys.executable, 'tools/summarize_metrics.py', str(work)]).stdout
    low, high = Config.fromfile(config).expected_metrics[metric]
    assert f'| run | {metric} | {metrics[metric]:.3f} | {low:.3f}-{high:.3f} |' in table
    assert f'outside the expected range: run {metric}' in table   # 2 iterations of training


def test_users_quadtree_maskrcnn_command_on_demo_data(demo_data, tmp_path):
    """`tools/train.py configs/quadtree_b_maskrcnn_coco.py` exactly as a user
    runs it, pointed at the demo data with --cfg-options (small images, no
    pretrained file); the official dense top-K 32 is clamped on these maps."""
    coco = f'{demo_data}/coco/'
    classes = "('circle','triangle','square','star')"
    proc = run_tool([
        sys.executable, 'tools/train.py', 'configs/quadtree_b_maskrcnn_coco.py',
        '--work-dir', str(tmp_path / 'qt'), '--cfg-options',
        f'train_dataloader.dataset.data_root={coco}',
        'train_dataloader.dataset.ann_file=annotations/instances_train.json',
        'train_dataloader.dataset.data_prefix.img=train/',
        f'train_dataloader.dataset.metainfo.classes={classes}',
        'train_dataloader.dataset.pipeline.2.scale=(128,128)',
        'val_dataloader.dataset.pipeline.1.scale=(128,128)',
        'train_dataloader.batch_size=4', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False',
        f'val_dataloader.dataset.data_root={coco}',
        'val_dataloader.dataset.ann_file=annotations/instances_val.json',
        'val_dataloader.dataset.data_prefix.img=val/',
        f'val_dataloader.dataset.metainfo.classes={classes}',
        f'val_evaluator.ann_file={coco}annotations/instances_val.json',
        'val_dataloader.num_workers=0', 'val_dataloader.persistent_workers=False',
        'model.backbone.init_cfg=None', 'model.roi_head.bbox_head.num_classes=4',
        'model.roi_head.mask_head.num_classes=4', 'train_cfg.max_epochs=1',
        'default_hooks.logger.interval=1'])
    log = proc.stdout + proc.stderr
    assert 'Epoch(train) [1][2/2]' in log, log[-3000:]
    assert 'exceeds the' in log and 'using top-' in log, 'top-K clamp not reported'
    assert (tmp_path / 'qt' / 'epoch_1.pth').is_file()
    assert 'coco/bbox_mAP' in log  # the last epoch is evaluated with the real metric

"""GPU acceptance check: one command that writes ``gpu_check.json`` and
``gpu_check.md`` to a folder (docs/testing.md, "GPU acceptance run").

    python .dev_scripts/run_gpu_check.py --out OUT [--device cuda] [--quick] [--budget-s 420]
                                       [--golden tests/data/golden] [--maskrcnn-iters 50]

Golden fixtures on the device, float16 / bfloat16 autocast of every backbone
and mixer, timed training steps (``.dev_scripts/gpu_check/``), then the
CUDA unit tests skipped on the CPU (through pytest) and the Mask R-CNN demo
trained on the device (through tools/train.py).  Exit status 1 when any check
failed.  ``--device cpu --quick`` is the test suite's run.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from gpu_check import (FAILED, PASSED, SKIPPED, Report, Section, Skip, demo_loss_verdict,
                       read_losses, run_checks)

ROOT = Path(__file__).resolve().parents[1]
#: the CUDA tests the CPU suite skips
CUDA_TESTS = ('tests/backbones/test_quadtree.py::test_cuda_matches_cpu',
              'tests/layers/test_deformable_merging.py::test_dtm_cuda_matches_cpu')
DET_DEMO = 'configs/demo/pvtv2_b0_maskrcnn_demo.py'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--out', required=True, help='folder for gpu_check.json and gpu_check.md')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--quick', action='store_true', help='a small subset (the test suite)')
    parser.add_argument('--budget-s', type=float, default=420.,
                        help='checks that would start later are recorded as skipped')
    parser.add_argument('--golden', default=str(ROOT / 'tests' / 'data' / 'golden'),
                        help='golden fixture folder')
    parser.add_argument('--maskrcnn-iters', type=int, default=None,
                        help='demo Mask R-CNN iterations on the device (default 50; 0 in --quick)')
    args = parser.parse_args(argv)
    if args.maskrcnn_iters is None:
        args.maskrcnn_iters = 0 if args.quick else 50
    if args.maskrcnn_iters < 0 or args.budget_s <= 0:
        parser.error('--maskrcnn-iters must be >= 0 and --budget-s > 0')
    return args


def _run(cmd: list, timeout: float, **env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env)
    return subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def cuda_tests(device: str):
    def run(report: Report, section: Section) -> None:
        def pytest_run():
            if not device.startswith('cuda'):
                raise Skip('needs CUDA')
            if not (ROOT / 'tests').is_dir():
                raise Skip('no tests/ folder beside tools/')
            proc = _run([sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
                         *CUDA_TESTS], timeout=max(30., report.budget_s - report.elapsed()))
            summary = (proc.stdout.strip().splitlines() or [''])[-1]
            if proc.returncode != 0 or 'skipped' in summary:
                raise AssertionError(f'pytest exit {proc.returncode}: {proc.stdout[-1500:]}')
            return {'pytest': summary}
        report.run(section, ' '.join(t.split('::')[1] for t in CUDA_TESTS), pytest_run)
    return run


def mmcv_has_cuda_ops() -> bool:
    from mmcv.ops import nms
    try:
        nms(torch.tensor([[0., 0., 1., 1.]], device='cuda'), torch.ones(1, device='cuda'), 0.5)
    except (RuntimeError, NotImplementedError, AssertionError):   # no CUDA implementation
        return False
    return True


def maskrcnn_demo(device: str, iters: int):
    def run(report: Report, section: Section) -> None:
        def train():
            if iters == 0:
                raise Skip('--maskrcnn-iters 0 (the --quick default; the suite checks the loss '
                           'verdict on its own demo run)')
            if device.startswith('cuda') and not mmcv_has_cuda_ops():
                raise Skip('mmcv was built without CUDA ops (installed with no GPU visible); '
                           'install with the GPU visible to run the Mask R-CNN demo')
            from vattn_mm.datasets import make_demo_dataset
            with tempfile.TemporaryDirectory() as tmp:
                coco = f"{make_demo_dataset(Path(tmp) / 'data', 8, 4, size=128)}/coco/"
                work = Path(tmp) / 'work'      # not under --out: only the report comes back
                opts = [f'{k}.dataset.data_root={coco}' for k in ('train_dataloader',
                                                                  'val_dataloader',
                                                                  'test_dataloader')]
                opts += [f'{k}={coco}annotations/instances_val.json'
                         for k in ('val_evaluator.ann_file', 'test_evaluator.ann_file')]
                opts += [f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
                         f'default_hooks.checkpoint.interval={iters}',
                         'default_hooks.logger.interval=1', 'train_dataloader.batch_size=2',
                         'train_dataloader.num_workers=0', 'val_dataloader.num_workers=0',
                         'train_dataloader.persistent_workers=False',
                         'val_dataloader.persistent_workers=False']
                env = {} if device.startswith('cuda') else {'CUDA_VISIBLE_DEVICES': ''}
                proc = _run([sys.executable, 'tools/train.py', DET_DEMO, '--work-dir', work,
                             '--cfg-options', *opts],
                            timeout=max(60., report.budget_s - report.elapsed() + 60), **env)
                if proc.returncode != 0:
                    raise AssertionError(f'tools/train.py exit {proc.returncode}: '
                                         f'{proc.stderr[-1500:]}')
                return demo_loss_verdict(read_losses(work))
        report.run(section, f'{DET_DEMO} {iters} iterations', train)
    return run


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    report = run_checks(
        out, device=args.device, quick=args.quick, budget_s=args.budget_s, golden=Path(args.golden),
        extra_sections=[
            ('cuda_tests', 'CUDA unit tests skipped on the CPU (pytest)', cuda_tests(args.device)),
            ('maskrcnn_demo', 'Mask R-CNN demo training on the device',
             maskrcnn_demo(args.device, args.maskrcnn_iters))])
    counts = report.counts()
    print(f"gpu_check: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} "
          f"skipped in {report.elapsed():.0f} s; report: {out / 'gpu_check.md'}")
    for section in report.sections:
        for check in section.checks:
            if check.status == FAILED:
                print(f'FAILED {section.name}: {check.name}: {check.detail[:300]}')
    return 1 if report.failed() else 0


if __name__ == '__main__':
    sys.exit(main())

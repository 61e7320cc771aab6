"""OpenMMLab's own analysis tools, as the mmdet / mmseg wheels ship them
(``<site-packages>/{mmdet,mmseg}/.mim/tools/``), on the demo configs:
browse_dataset, analyze_logs (the demo training's loss curve),
confusion_matrix and get_flops. Where a tool fails for a reason in the tool,
the test checks that reason, which docs/training.md ("OpenMMLab's analysis
tools") states with the replacement.

One subprocess per tool, two running at a time (the module fixture starts them
all), on the session's demo data and trained Mask R-CNN (tests/conftest.py)."""
import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..engine.test_training import DET_DEMO, SEG_DEMO, data_options, without_module_list

#: slow (OpenMMLab's analysis tools on trained demo models); extended: other people's
#: tools on our configs, beside the suite of our own code
pytestmark = [pytest.mark.slow, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[2]
#: the demo configs' dataloaders without worker processes
NO_WORKERS = [f'{split}_dataloader.{key}' for split in ('train', 'val', 'test')
              for key in ('num_workers=0', 'persistent_workers=False')]
PNG = b'\x89PNG\r\n\x1a\n'


def upstream(package: str, relative: str) -> str:
    """Path of a tool the ``package`` wheel ships under ``.mim/tools/``."""
    spec = importlib.util.find_spec(package)
    path = Path(next(iter(spec.submodule_search_locations))) / '.mim' / 'tools' / relative
    assert path.is_file(), f'{package} ships no tools/{relative}'
    return str(path)


def run(args: list) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS='1', MPLBACKEND='agg')
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def succeeded(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (f'{proc.args[1:]} failed:\n{proc.stdout[-3000:]}\n'
                                  f'{without_module_list(proc.stderr)[-6000:]}')
    return proc


def failed_with(proc: subprocess.CompletedProcess, error: str) -> None:
    assert proc.returncode != 0 and error in proc.stderr, \
        f'{proc.args[1:]}: expected {error!r}:\n{without_module_list(proc.stderr)[-3000:]}'


def scalars_log(work: Path) -> Path:
    """The json scalars log mmengine writes: <work>/<time>/vis_data/<time>.json."""
    logs = [p for p in work.glob('*/vis_data/*.json') if p.stem != 'scalars']
    assert len(logs) == 1, logs
    return logs[0]


@pytest.fixture(scope='module')
def runs(demo_data, demo_trained, tmp_path_factory):
    """``runs[name]``: the finished subprocesses of one tool (in order) and
    its output folder."""
    work = demo_trained(DET_DEMO)
    checkpoint = (work / 'last_checkpoint').read_text().strip()
    log = scalars_log(work)
    out = tmp_path_factory.mktemp('upstream')
    det = ['--cfg-options', *data_options(demo_data, DET_DEMO), *NO_WORKERS]
    seg = ['--cfg-options', *data_options(demo_data, SEG_DEMO), *NO_WORKERS]
    jobs = {
        'browse_det': [[upstream('mmdet', 'analysis_tools/browse_dataset.py'), DET_DEMO,
                         '--output-dir', out / 'browse_det', '--not-show', *det]],
        'browse_seg': [[upstream('mmseg', 'analysis_tools/browse_dataset.py'), SEG_DEMO,
                         '--output-dir', out / 'browse_seg', '--not-show', *seg]],
        'logs_det': [[upstream('mmdet', 'analysis_tools/analyze_logs.py'), 'plot_curve', log,
                       '--keys', 'loss', 'loss_mask', '--out', out / 'loss_det.png',
                       '--backend', 'agg']],
        'logs_seg': [[upstream('mmseg', 'analysis_tools/analyze_logs.py'), log, '--keys', 'loss',
                       '--out', out / 'loss_seg.png', '--backend', 'agg']],
        'confusion_det': [
            [upstream('mmdet', 'test.py'), DET_DEMO, checkpoint, '--work-dir',
             out / 'test_det', '--out', out / 'results.pkl', *det],
            [upstream('mmdet', 'analysis_tools/confusion_matrix.py'), DET_DEMO,
             out / 'results.pkl', out / 'matrix_det', '--score-thr', '0.05', *det]],
        # label maps as the predictions mmseg's test.py --out writes: the ground truth's
        'confusion_seg': [[upstream('mmseg', 'analysis_tools/confusion_matrix.py'), SEG_DEMO,
                            demo_data / 'ade' / 'annotations' / 'validation',
                            out / 'matrix_seg', *seg]],
        'flops_det': [[upstream('mmdet', 'analysis_tools/get_flops.py'), DET_DEMO,
                        '--num-images', '1', *det]],
        'flops_seg': [[upstream('mmseg', 'analysis_tools/get_flops.py'), SEG_DEMO,
                        '--shape', '256', '256']],
    }

    def run_job(commands):
        return [run(args) for args in commands]

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run_job, commands) for name, commands in jobs.items()}
        return {name: (future.result(), out) for name, future in futures.items()}


def test_browse_dataset_mmdet(runs, demo_data):
    """A picture of the training pipeline's output for every training image."""
    (proc, ), out = runs['browse_det']
    succeeded(proc)
    images = sorted(p.name for p in (demo_data / 'coco' / 'train').glob('*.jpg'))
    assert sorted(p.name for p in (out / 'browse_det').iterdir()) == images


def test_browse_dataset_mmseg_fails_in_opencv(runs):
    """The tool hands the visualizer a permuted (non-contiguous) image;
    labelling the classes draws into an array of its layout, which OpenCV 5
    refuses."""
    (proc, ), _ = runs['browse_seg']
    failed_with(proc, 'Layout of the output array img is incompatible with cv::Mat')


@pytest.mark.parametrize('job', ['logs_det', 'logs_seg'])
def test_analyze_logs_plots_the_demo_loss_curve(runs, job):
    (proc, ), out = runs[job]
    succeeded(proc)
    assert 'metric is loss' in proc.stdout
    assert (out / f'loss_{job[-3:]}.png').read_bytes()[:8] == PNG


def test_confusion_matrix_mmdet(runs):
    """mmdet's test.py --out writes the predictions, confusion_matrix.py
    counts them against the ground truth and plots the matrix."""
    procs, out = runs['confusion_det']
    for proc in procs:
        succeeded(proc)
    assert (out / 'matrix_det' / 'confusion_matrix.png').read_bytes()[:8] == PNG


def test_confusion_matrix_mmseg_needs_a_registered_dataset(runs):
    """mmseg's tool takes the class names from the dataset class
    (``dataset.METAINFO``), empty for a ``BaseSegDataset`` whose classes the
    config gives (the demo's)."""
    (proc, ), _ = runs['confusion_seg']
    failed_with(proc, "KeyError: 'classes'")


def test_get_flops_mmdet(runs):
    """It runs; mmengine's counter skips the attention products
    (``scaled_dot_product_attention``)."""
    (proc, ), _ = runs['flops_det']
    succeeded(proc)
    assert 'Flops:' in proc.stdout and 'Params:' in proc.stdout
    assert 'Unsupported operator aten::scaled_dot_product_attention' in proc.stdout + proc.stderr


def test_get_flops_mmseg_fails_in_the_mmengine_call(runs):
    """mmseg's tool passes both ``input_shape`` and ``inputs`` to mmengine's
    ``get_model_complexity_info``, which refuses that (the replacement,
    tools/analysis/get_flops.py, counts this config in tests/analysis/test_analysis.py)."""
    (proc, ), _ = runs['flops_seg']
    failed_with(proc, '"input_shape" and "inputs" cannot be both set')

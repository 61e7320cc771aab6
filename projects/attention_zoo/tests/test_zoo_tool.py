"""projects/attention_zoo/tools/zoo.py: the attention zoo's measuring tool end to end in
quick mode, and its report from earlier runs (the library:
projects/attention_zoo/tests/test_zoo.py)."""
import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from attention_zoo import TASKS, Accuracy, earlier_runs, read_accuracy_csv, write_dataclass_csv
from attention_zoo.probe_study import read_probe_csv

from tests.tools import ROOT, load_tool
from vattn_mm.analysis.bench import Row, read_csv, write_csv

#: slow (the zoo tool trains and tests every quick variant end to end)
pytestmark = pytest.mark.slow

PROJECT = ROOT / 'projects' / 'attention_zoo'
# zoo.py imports these as sibling modules
load_tool('tools/project_paths.py', PROJECT)
load_tool('analysis/bench_workers.py')
load_tool('tools/zoo_workers.py', PROJECT)
TOOL = load_tool('tools/zoo.py', PROJECT)


def test_quick_mode_end_to_end(tmp_path):
    """What the full run does, at tiny widths, for one variant: speed sweep,
    training and testing on both demo tasks, CSVs, tables and plots (tables
    of several variants: test_report_from_earlier_runs)."""
    out = tmp_path / 'zoo'
    res = subprocess.run([sys.executable, str(PROJECT / 'tools' / 'zoo.py'), '--quick',
                          '--variants', 'hilo', '--out-dir', str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    with open(out / 'zoo_speed.csv') as f:
        rows = list(csv.DictReader(f))
    assert [(r['target'], r['shape']) for r in rows] == [
        ('hilo@quick', s) for s in ('64x64', '96x96')]
    assert all(float(r['fwd_ms']) > 0 and float(r['train_ms']) > 0 for r in rows)
    # the largest token mixer's own forward peak, measured inside the whole model's
    # (at these tiny sizes a mixer may fit in memory already mapped: 0 MiB)
    assert all(0 <= float(r['fwd_mixer_peak_mib']) <= float(r['fwd_peak_mib']) for r in rows)
    with open(out / 'zoo_accuracy.csv') as f:
        runs = list(csv.DictReader(f))
    assert [(r['variant'], r['task']) for r in runs] == [('hilo', 'seg'), ('hilo', 'det')]
    assert all(not r['error'] for r in runs)
    table = (out / 'zoo.md').read_text()
    assert 'NOT ImageNet / COCO / ADE20K accuracy' in table and '| hilo |' in table
    for name in ('zoo_latency', 'zoo_memory', 'zoo_accuracy'):
        assert (out / f'{name}.png').stat().st_size > 0
    with open(out / 'zoo_scaling.csv') as f:
        fits = list(csv.DictReader(f))
    assert all(math.isfinite(float(r['fwd_time'])) for r in fits)


def test_report_from_earlier_runs(tmp_path):
    """``--report-from``: each variant's speed rows and accuracy runs come
    from the last directory that has them; nothing is measured."""
    def run_dir(name, fwd_ms, variants):
        folder = tmp_path / name
        folder.mkdir()
        rows = [Row(v, f'{s}x{s}', 'cpu', 'fp32', 1., s / 100, fwd_ms=fwd_ms * s / 64,
                             fwd_peak_mib=s / 10, fwd_mixer_peak_mib=s / 100, threads=2)
                for v in variants for s in (64, 96)]
        write_csv(rows, folder / 'zoo_speed.csv')
        metrics = {'mIoU': fwd_ms, 'coco/bbox_mAP': 0.5, 'coco/segm_mAP': 0.4}
        runs = [Accuracy(v, t, 0, metrics, 1.) for v in variants for t in TASKS]
        write_dataclass_csv(runs, folder / 'zoo_accuracy.csv', Accuracy)
        return folder
    first, second = run_dir('a', 10., ['sra', 'hilo']), run_dir('b', 20., ['sra'])
    out = tmp_path / 'out'
    assert TOOL.main(['--report-from', str(first), str(second), '--variants', 'sra', 'hilo',
                     '--sizes', '64', '96', '--ref-size', '64', '--out-dir', str(out)]) == 0
    rows = read_csv(out / 'zoo_speed.csv')
    assert [(r.target, r.fwd_ms) for r in rows if r.shape == '64x64'] == [('sra', 20.),
                                                                         ('hilo', 10.)]
    runs = read_accuracy_csv(out / 'zoo_accuracy.csv')
    assert {(r.variant, r.metrics['mIoU']) for r in runs} == {('sra', 20.), ('hilo', 10.)}
    assert '| hilo | 10 | 15 |' in (out / 'zoo.md').read_text()
    with pytest.raises(FileNotFoundError, match='neither'):
        earlier_runs([tmp_path / 'out' / 'runs'], ['sra'])


def test_probe_report_merges_a_rerun(tmp_path):
    """``--parts probes --report-from FULL RERUN``: a run (design, probe,
    seed) comes from the last directory that has it; the set-up line names
    the longer schedule of the probes that ran and what the CPU scale
    leaves to the GPU's."""
    from attention_zoo.probe_study import ProbeRun
    dirs = []
    for name, score, probes in (('full', 0.3, ('long_range', 'scale_range')),
                                ('rerun', 0.9, ('scale_range',))):
        dirs.append(tmp_path / name)
        dirs[-1].mkdir()
        runs = [ProbeRun(f'mixer:{v}', p, s, {'112' if p == 'long_range' else '128': score})
                for v in ('swin', 'global') for p in probes for s in range(3)]
        write_dataclass_csv(runs, dirs[-1] / 'zoo_probes.csv', ProbeRun)
    out = tmp_path / 'out'
    assert TOOL.main(['--parts', 'probes', '--report-from', *map(str, dirs),
                      '--out-dir', str(out)]) == 0
    runs = read_probe_csv(out / 'zoo_probes.csv')
    assert len(runs) == 12 and {(r.probe, r.seed) for r in runs if r.design == 'mixer:swin'} == {
        (p, s) for p in ('long_range', 'scale_range') for s in range(3)}
    assert {r.probe: next(iter(r.scores.values())) for r in runs} == {'long_range': 0.3,
                                                                      'scale_range': 0.9}
    setup = (out / 'zoo_probes.md').read_text().splitlines()[0]
    assert '600 AdamW steps (scale_range: 900) of batch 8' in setup
    assert ('scale_range, scale_range_large, resolution_small, fine_structure_thin, '
            'long_range_far_long left to the gpu scale unless named') in setup


def _zoo(*args, timeout=600):
    return subprocess.run([sys.executable, str(PROJECT / 'tools' / 'zoo.py'), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_probe_study_quick_end_to_end(tmp_path):
    """``--parts probes --quick``: every axis (a subset) on a base probe and
    its variant, every run in the CSV, the report between the page's probe
    markers, the figures."""
    out, page = tmp_path / 'probes', tmp_path / 'zoo.md'
    page.write_text('# zoo\n<!-- zoo:probes -->\nold\n<!-- /zoo:probes -->\ntail\n')
    res = _zoo('--parts', 'probes', '--quick', '--variants', 'swin', 'global', '--probes',
               'long_range', 'resolution', 'resolution_small', '--positions', 'none',
               'absolute', '--tokenisers', 'overlap', '--windows', 'swin+table',
               '--out-dir', str(out), '--docs', str(page))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    runs = read_probe_csv(out / 'zoo_probes.csv')
    assert sorted((r.design, r.probe, r.seed) for r in runs) == sorted(
        [(f'mixer:{v}', 'long_range', s) for v in ('swin', 'global') for s in (0, 1)]
        + [(f'position:{p}+overlap', r, s) for p in ('none', 'absolute')
           for r in ('resolution', 'resolution_small') for s in (0, 1)]
        + [('window:swin+table', r, s) for r in ('resolution', 'resolution_small')
           for s in (0, 1)])
    assert all(not r.error and r.peak_rss_mib > 0 and set(r.scores) == set(r.trivial)
               for r in runs)
    text = page.read_text()
    assert '\nold\n' not in text and text.endswith('tail\n') and '**Token mixers**' in text
    assert '![zoo_capability](zoo_capability.png)' in text
    assert (tmp_path / 'zoo_resolution.png').stat().st_size > 0
    assert '![zoo_window](zoo_window.png)' in text and '**Across geometries' in text
    assert not (out / 'zoo_speed.csv').exists()      # only the part asked for ran


@pytest.mark.parametrize('limit, reason', [(('--probe-memory-mib', '50'), 'resident memory'),
                                           (('--time-budget-min', '0.02'), 'time budget')])
def test_probe_study_stops_at_its_caps(tmp_path, limit, reason):
    """A process past the memory cap, or a study past its time budget, is
    stopped; its runs carry the reason and the tool exits 1."""
    out = tmp_path / 'probes'
    res = _zoo('--parts', 'probes', '--quick', '--axes', 'mixer', '--variants', 'swin',
               '--probes', 'fine_structure', '--out-dir', str(out), *limit)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    runs = read_probe_csv(out / 'zoo_probes.csv')
    assert len(runs) == 2 and all(reason in r.error for r in runs)


def test_probe_options_are_checked():
    with pytest.raises(SystemExit):
        TOOL.parse_args(['--parts', 'probes', '--scale', 'gpu'])          # sized for a GPU
    with pytest.raises(SystemExit):
        TOOL.parse_args(['--parts', 'probes', '--time-budget-min', '0'])
    with pytest.raises(SystemExit):
        TOOL.parse_args(['--parts', 'probes', '--threads', '0'])
    args = TOOL.parse_args(['--parts', 'probes', '--quick'])
    assert args.scale == 'smoke' and args.probe_seeds == [0, 1]
    assert TOOL.parse_args(['--parts', 'probes']).probe_seeds == [0, 1, 2]

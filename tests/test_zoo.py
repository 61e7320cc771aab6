"""The attention zoo (docs/zoo.md): its variants, as the mixers declare them,
are one macro architecture with only the mixer changed, matched in cost to
the reference; the config files are the same variants; the measuring tool
(tools/analysis/zoo.py) runs end to end in quick mode."""
import csv
import math
import subprocess
import sys

import pytest
from mmengine.config import Config

from vattn_mm.layers import MIXERS

from .layers.mixer_contract import check_zoo_variants, zoo_tool

ZOO = zoo_tool()
#: the zoo's configs as files for tools/train.py (docs/zoo.md)
FRAGMENTS = ZOO.ROOT / 'configs' / '_base_' / 'backbones'
TASK_CONFIGS = ZOO.ROOT / 'configs' / 'zoo'


@pytest.mark.parametrize('name', sorted(MIXERS))
def test_mixer_zoo_variants(name):
    check_zoo_variants(name)


def test_variants_reference_first():
    assert ZOO.variants()[0] == ZOO.REFERENCE and 'sra_peg' in ZOO.variants()
    with pytest.raises(ValueError, match='unknown zoo variant'):
        ZOO.backbone_config('no_such_variant')


def test_config_files_are_the_declared_variants():
    """``zoo_<variant>.py`` builds the backbone the zoo builds from the
    declarations; ``configs/zoo/<variant>_<task>.py`` is one template per
    task (the recipe and that fragment) whose model is the zoo's training
    model (loaded for the reference: loading costs a second a config)."""
    fragments = sorted(p.stem[4:] for p in FRAGMENTS.glob('zoo_*.py') if p.stem != 'zoo_common')
    assert set(fragments) <= set(ZOO.variants()), fragments
    for name in fragments:
        backbone = Config.fromfile(str(FRAGMENTS / f'zoo_{name}.py')).backbone.to_dict()
        backbone.pop('init_cfg')
        assert backbone == Config(dict(b=ZOO.backbone_config(name))).b.to_dict(), name
    for task, (recipe, _) in ZOO.TASKS.items():
        suffix = recipe.stem.replace('zoo_', '')
        names = sorted(f.name[:-len(f'_{suffix}.py')] for f in TASK_CONFIGS.glob(f'*_{suffix}.py'))
        assert names == fragments, (task, names)
        template = (TASK_CONFIGS / f'{ZOO.REFERENCE}_{suffix}.py').read_text()
        for name in names:
            path = TASK_CONFIGS / f'{name}_{suffix}.py'
            assert path.read_text().replace(name, ZOO.REFERENCE) == template, path
        on_disk = Config.fromfile(str(TASK_CONFIGS / f'{ZOO.REFERENCE}_{suffix}.py')).model
        assert on_disk.to_dict() == ZOO.task_config(ZOO.REFERENCE, task).model.to_dict(), task


def test_pareto_front():
    points = {'a': (10, 0.5), 'b': (20, 0.7), 'c': (30, 0.6), 'd': (5, 0.2)}
    assert ZOO.pareto_front(points) == ['d', 'a', 'b']


def test_sweep_stops_at_the_memory_cap(monkeypatch):
    """Peaks grow 4x per size step: the size whose extrapolated peak passes
    the cap is not run, and the row says so."""
    benchlib = ZOO.benchlib
    ran = []

    def fake_case(self, case, timeout=None, memory=True):
        ran.append(case.shape[0])
        peak = case.shape[0] ** 2 / 1000
        return benchlib.Measurement(latency_ms=case.shape[0] / 10, peak_mib=peak,
                                    mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(benchlib.CaseWorkers, 'run_case', fake_case)
    monkeypatch.setattr(ZOO, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep('sra@quick', [100, 200, 400, 800], ('fwd', 'train'),
                     memory_cap_mib=100, case_timeout=10)
    assert sorted(set(ran)) == [100, 200]
    assert [r.shape for r in rows] == ['100x100', '200x200', '400x400']
    assert rows[-1].error.startswith('stopped: predicted peak 160 MiB > memory cap')
    fit = ZOO.scaling('sra', rows)
    assert fit.fwd_time == pytest.approx(0.5) and fit.fwd_memory == pytest.approx(1)
    assert fit.stopped == rows[-1].error


def test_sweep_stops_at_the_time_cap(monkeypatch):
    """Latency grows 4x per size step: the size whose extrapolated iteration
    time passes the cap is not run."""
    benchlib = ZOO.benchlib

    def fake_case(self, case, timeout=None, memory=True):
        return benchlib.Measurement(latency_ms=case.shape[0] ** 2 / 10, peak_mib=1.,
                                    mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(benchlib.CaseWorkers, 'run_case', fake_case)
    monkeypatch.setattr(ZOO, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep('sra@quick', [100, 200, 400, 800], ('fwd', 'train'),
                     memory_cap_mib=100, case_timeout=10, time_cap_s=5)
    assert [r.shape for r in rows] == ['100x100', '200x200', '400x400']
    assert rows[-1].error == 'stopped: predicted 16 s per iteration > time cap 5 s'


def test_sweep_trains_up_to_train_max_size(monkeypatch):
    """Above ``train_max_size`` only the forward runs, and the memory cap is
    judged on the forward peak there (the training peak would stop it)."""
    benchlib = ZOO.benchlib
    ran = []

    def fake_case(self, case, timeout=None, memory=True):
        ran.append((case.shape[0], case.mode))
        peak = case.shape[0] ** 2 / (1000 if case.mode == 'train' else 4000)
        return benchlib.Measurement(latency_ms=case.shape[0] / 10, peak_mib=peak,
                                    mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(benchlib.CaseWorkers, 'run_case', fake_case)
    monkeypatch.setattr(ZOO, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep('sra@quick', [100, 200, 400], ('fwd', 'train'), memory_cap_mib=100,
                     case_timeout=10, train_max_size=200)
    assert ran == [(100, 'fwd'), (100, 'train'), (200, 'fwd'), (200, 'train'), (400, 'fwd')]
    assert not any(r.error for r in rows)
    assert rows[-1].train_ms is None and rows[-1].fwd_peak_mib == 40


def test_quick_mode_end_to_end(tmp_path):
    """What the full run does, at tiny widths: speed sweep, training and
    testing on both demo tasks, CSVs, tables and plots."""
    out = tmp_path / 'zoo'
    res = subprocess.run([sys.executable, str(ZOO.ROOT / 'tools/analysis/zoo.py'), '--quick',
                          '--variants', 'sra', 'hilo', '--out-dir', str(out)],
                         cwd=ZOO.ROOT, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    with open(out / 'zoo_speed.csv') as f:
        rows = list(csv.DictReader(f))
    assert [(r['target'], r['shape']) for r in rows] == [
        (v + '@quick', s) for v in ('sra', 'hilo') for s in ('64x64', '96x96')]
    assert all(float(r['fwd_ms']) > 0 and float(r['train_ms']) > 0 for r in rows)
    # the largest token mixer's own forward peak, measured inside the whole model's
    # (at these tiny sizes a mixer may fit in memory already mapped: 0 MiB)
    assert all(0 <= float(r['fwd_mixer_peak_mib']) <= float(r['fwd_peak_mib']) for r in rows)
    with open(out / 'zoo_accuracy.csv') as f:
        runs = list(csv.DictReader(f))
    assert [(r['variant'], r['task']) for r in runs] == [
        (v, t) for v in ('sra', 'hilo') for t in ('seg', 'det')]
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
    benchlib = ZOO.benchlib

    def run_dir(name, fwd_ms, variants):
        folder = tmp_path / name
        folder.mkdir()
        rows = [benchlib.Row(v, f'{s}x{s}', 'cpu', 'fp32', 1., s / 100, fwd_ms=fwd_ms * s / 64,
                             fwd_peak_mib=s / 10, fwd_mixer_peak_mib=s / 100, threads=2)
                for v in variants for s in (64, 96)]
        benchlib.write_csv(rows, folder / 'zoo_speed.csv')
        metrics = {'mIoU': fwd_ms, 'coco/bbox_mAP': 0.5, 'coco/segm_mAP': 0.4}
        runs = [ZOO.Accuracy(v, t, 0, metrics, 1.) for v in variants for t in ZOO.TASKS]
        ZOO.write_dataclass_csv(runs, folder / 'zoo_accuracy.csv', ZOO.Accuracy)
        return folder
    first, second = run_dir('a', 10., ['sra', 'hilo']), run_dir('b', 20., ['sra'])
    out = tmp_path / 'out'
    assert ZOO.main(['--report-from', str(first), str(second), '--variants', 'sra', 'hilo',
                     '--sizes', '64', '96', '--ref-size', '64', '--out-dir', str(out)]) == 0
    rows = benchlib.read_csv(out / 'zoo_speed.csv')
    assert [(r.target, r.fwd_ms) for r in rows if r.shape == '64x64'] == [('sra', 20.),
                                                                         ('hilo', 10.)]
    runs = ZOO.read_accuracy_csv(out / 'zoo_accuracy.csv')
    assert {(r.variant, r.metrics['mIoU']) for r in runs} == {('sra', 20.), ('hilo', 10.)}
    assert '| hilo | 10 | 15 |' in (out / 'zoo.md').read_text()
    with pytest.raises(FileNotFoundError, match='neither'):
        ZOO.earlier_runs([tmp_path / 'out' / 'runs'], ['sra'])

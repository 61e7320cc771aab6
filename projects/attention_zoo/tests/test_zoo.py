"""The attention zoo (README.md): its variants, as its table declares them
for the library's mixers, are one macro architecture with only the mixer
changed, matched in cost to the reference; the config files are the same
variants; the speed sweep stops at its caps.  The tool: test_zoo_tool.py."""
import functools

import attention_zoo as ZOO
import pytest
from attention_zoo import speed
from attention_zoo.variant_table import ZOO_VARIANTS, ZooVariant
from attention_zoo.variants import QUICK_FPN_CHANNELS
from mmengine.config import Config

from vattn_mm.analysis.bench import Measurement
from vattn_mm.layers import MIXERS

#: the zoo's configs as files for tools/train.py (README.md)
FRAGMENTS = ZOO.CONFIGS / '_base_' / 'backbones'
TASK_CONFIGS = ZOO.CONFIGS
#: the zoo's tolerance on parameters and GMACs against its reference
ZOO_MATCH = 0.05


@functools.lru_cache(maxsize=None)
def zoo_reference_cost() -> tuple[float, float]:
    return ZOO.complexity(ZOO.REFERENCE, 224, 'backbone')


@pytest.mark.parametrize('name', sorted(ZOO_VARIANTS))
def test_mixer_zoo_variants(name):
    """The mixer has at least one variant in the zoo's table; each changes
    only the mixer (and a listed position module) of the zoo's macro
    architecture, builds this mixer in every stage, and, where listed as
    matched, brings the backbone's parameters and GMACs at 224x224 within
    5 % of the reference's."""
    variants = ZOO_VARIANTS[name]
    assert variants and all(isinstance(v, ZooVariant) for v in variants.values()), name
    common = Config.fromfile(str(ZOO.COMMON)).backbone.to_dict()
    common.pop('init_cfg')
    ref = zoo_reference_cost()
    for variant, entry in variants.items():
        backbone = ZOO.backbone_config(variant)
        extra = {'mixer'} | ({'position'} if entry.position is not None else set())
        assert set(backbone) - set(common) == extra, variant
        assert {k: backbone[k] for k in common} == common, variant
        mixers = backbone['mixer'] if isinstance(backbone['mixer'], list) else [backbone['mixer']]
        assert {m['type'] for m in mixers} == {name}, variant
        params, gmacs = ZOO.complexity(variant, 224, 'backbone')
        assert params > 0 and gmacs > 0, variant
        if entry.matched:
            assert abs(params / ref[0] - 1) <= ZOO_MATCH, (variant, params, ref)
            assert abs(gmacs / ref[1] - 1) <= ZOO_MATCH, (variant, gmacs, ref)


def test_bad_variant_declarations_are_clear_errors():
    with pytest.raises(ValueError, match='one value per stage'):
        ZooVariant.per_stage(attn_dims=(32, 64), expansion=(1, 2, 4))


def test_table_lists_registered_mixers():
    assert set(ZOO_VARIANTS) <= set(MIXERS), sorted(set(ZOO_VARIANTS) - set(MIXERS))


def test_variants_reference_first():
    assert ZOO.variants()[0] == ZOO.REFERENCE and 'sra_peg' in ZOO.variants()
    with pytest.raises(ValueError, match='unknown zoo variant'):
        ZOO.backbone_config('no_such_variant')


@pytest.mark.parametrize('name', ZOO.variants())
def test_quick_variant_builds_and_runs(name):
    """Every variant has a quick form (tiny widths, the mixer's widths
    scaled with them) that builds and runs: the smoke runs of the tools use it."""
    import torch
    target = ZOO.build_zoo_target(f'{name}@quick')
    with torch.no_grad():
        maps = target.forward(torch.randn(1, 3, 64, 64))
    assert len(maps) == 5 and all(m.shape[1] == QUICK_FPN_CHANNELS for m in maps)


def test_config_files_are_the_declared_variants():
    """``zoo_<variant>.py`` builds the backbone the zoo builds from the
    declarations; ``projects/attention_zoo/configs/<variant>_<task>.py`` is one template per
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


class FakeWorkers:
    """Measures a sweep's cases with ``fake_case(case, timeout)``."""

    def __init__(self, fake_case):
        self.run_case = fake_case


def test_sweep_stops_at_the_memory_cap(monkeypatch):
    """Peaks grow 4x per size step: the size whose extrapolated peak passes
    the cap is not run, and the row says so."""
    ran = []

    def fake_case(case, timeout=None):
        ran.append(case.shape[0])
        peak = case.shape[0] ** 2 / 1000
        return Measurement(latency_ms=case.shape[0] / 10, peak_mib=peak,
                           mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(speed, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep(FakeWorkers(fake_case), 'sra@quick', [100, 200, 400, 800], ('fwd', 'train'),
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
    def fake_case(case, timeout=None):
        return Measurement(latency_ms=case.shape[0] ** 2 / 10, peak_mib=1.,
                           mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(speed, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep(FakeWorkers(fake_case), 'sra@quick', [100, 200, 400, 800], ('fwd', 'train'),
                     memory_cap_mib=100, case_timeout=10, time_cap_s=5)
    assert [r.shape for r in rows] == ['100x100', '200x200', '400x400']
    assert rows[-1].error == 'stopped: predicted 16 s per iteration > time cap 5 s'


def test_sweep_trains_up_to_train_max_size(monkeypatch):
    """Above ``train_max_size`` only the forward runs, and the memory cap is
    judged on the forward peak there (the training peak would stop it)."""
    ran = []

    def fake_case(case, timeout=None):
        ran.append((case.shape[0], case.mode))
        peak = case.shape[0] ** 2 / (1000 if case.mode == 'train' else 4000)
        return Measurement(latency_ms=case.shape[0] / 10, peak_mib=peak,
                           mm_gflops=100., threads=1, memory_method='fake', load1=0.)
    monkeypatch.setattr(speed, 'complexity', lambda spec, size: (1., size ** 2 / 1e5))
    rows = ZOO.sweep(FakeWorkers(fake_case), 'sra@quick', [100, 200, 400], ('fwd', 'train'), memory_cap_mib=100,
                     case_timeout=10, train_max_size=200)
    assert ran == [(100, 'fwd'), (100, 'train'), (200, 'fwd'), (200, 'train'), (400, 'fwd')]
    assert not any(r.error for r in rows)
    assert rows[-1].train_ms is None and rows[-1].fwd_peak_mib == 40

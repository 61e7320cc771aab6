"""The attention zoo (docs/zoo.md, vattn_mm.analysis.zoo): its variants are
one macro architecture with only the mixer changed, matched in cost to the
reference; the speed sweep stops at its caps.  The tool:
tests/test_zoo_tool.py."""
import pytest
from mmengine.config import Config

from vattn_mm.analysis import zoo as ZOO
from vattn_mm.analysis.bench import Measurement
from vattn_mm.analysis.zoo import speed
from vattn_mm.layers import MIXERS

COMMON = ZOO.FRAGMENTS / 'zoo_common.py'
#: the quadratic baseline, not matched to the reference (docs/zoo.md says why)
UNMATCHED = {'global'}


def test_every_mixer_has_a_variant():
    mixers = set()
    for name in ZOO.variants():
        mixer = Config.fromfile(str(ZOO.FRAGMENTS / f'zoo_{name}.py')).backbone.mixer
        mixers |= {m['type'] for m in (mixer if isinstance(mixer, list) else [mixer])}
    assert mixers == set(MIXERS)
    assert ZOO.variants()[0] == ZOO.REFERENCE and 'sra_peg' in ZOO.variants()


@pytest.mark.parametrize('name', ZOO.variants())
def test_variant_changes_only_the_mixer(name):
    common = Config.fromfile(str(COMMON)).backbone.to_dict()
    backbone = ZOO.backbone_config(name)
    extra = {'mixer', 'position'} if name == 'sra_peg' else {'mixer'}
    assert set(backbone) - set(common) == extra
    assert {k: backbone[k] for k in common if k != 'init_cfg'} == {
        k: v for k, v in common.items() if k != 'init_cfg'}


def test_variants_are_matched_to_the_reference():
    """The table of docs/zoo.md: parameters and GMACs of the backbone at
    224x224 within 5 % of the reference's."""
    ref = ZOO.complexity(ZOO.REFERENCE, 224, 'backbone')
    for name in ZOO.variants():
        params, gmacs = ZOO.complexity(name, 224, 'backbone')
        assert params > 0 and gmacs > 0
        if name not in UNMATCHED:
            assert abs(params / ref[0] - 1) <= 0.05, (name, params, ref)
            assert abs(gmacs / ref[1] - 1) <= 0.05, (name, gmacs, ref)


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

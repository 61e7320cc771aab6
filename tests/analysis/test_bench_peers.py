"""Peers for ``tools/analysis/benchmark.py --against``
(vattn_mm.analysis.bench.peers): timm's and mmdet's versions of our
backbones get our weights and give our outputs, and the paired timing runs
every implementation."""
import importlib.util

import pytest

from vattn_mm.analysis.bench import Case
from vattn_mm.analysis.bench import peers as PEERS

HAVE_TIMM = importlib.util.find_spec('timm') is not None


def available(name: str) -> bool:
    return not name.startswith('timm/') or HAVE_TIMM


@pytest.mark.parametrize('name', sorted(f'{lib}/{spec}' for lib, spec in PEERS.PEERS))
def test_peer_has_our_weights_and_outputs(name):
    if not available(name):
        pytest.skip('timm is an optional benchmark extra (tools/install.sh installs it)')
    spec = name.split('/', 1)[1]
    assert PEERS.agreement(spec, name, (96, 64)) < 1e-4


def test_peer_names_and_errors():
    assert PEERS.peers_of('PVTv2:b2', ['mmdet', 'timm']) == ['mmdet/PVTv2:b2', 'timm/PVTv2:b2']
    assert PEERS.peers_of('P2T:small', ['timm']) == []
    with pytest.raises(ValueError, match='unknown peer libraries'):
        PEERS.peers_of('PVTv2:b2', ['detectron2'])
    with pytest.raises(ValueError, match='no peer'):
        PEERS.build_peer_target('timm/P2T:small')


@pytest.mark.parametrize('mode', ['fwd', 'train'])
def test_paired_timing_runs_every_implementation(mode):
    case = Case('PVTv2:b2', (64, 64), mode, warmup=1, iters=2, threads=1)
    times = PEERS.compare(case, ['mmdet/PVTv2:b2'])
    assert set(times) == {'PVTv2:b2', 'mmdet/PVTv2:b2'}
    assert all(t['ms'] > 0 and t['iqr_ms'] >= 0 and t['runs'] >= 2 for t in times.values())
    row = dict(target='PVTv2:b2', shape='64x64', mode=mode, times=times,
               peak_mib={'PVTv2:b2': 100., 'mmdet/PVTv2:b2': 120.},
               deviation={'mmdet/PVTv2:b2': 1e-6})
    table = PEERS.markdown([row])
    assert '| PVTv2:b2 | 64x64 | ' + mode + ' | mmdet |' in table
    assert '1.20x' in table
    runs = f"| {times['PVTv2:b2']['runs']} / {times['mmdet/PVTv2:b2']['runs']} |"
    assert runs in table


def test_runtime_peers_time_our_own_model_checked():
    """``--against onnxruntime``: our model exported (checked against PyTorch
    at the case's size), timed beside eager, its deviation reported."""
    assert PEERS.peers_of('P2T:small', ['onnxruntime', 'inductor']) == [
        'onnxruntime/P2T:small', 'inductor/P2T:small']
    case = Case('PVTv2:b0', (64, 96), 'fwd', warmup=1, iters=2, threads=1)
    times = PEERS.compare(case, ['onnxruntime/PVTv2:b0'])
    ort = times['onnxruntime/PVTv2:b0']
    assert ort['ms'] > 0 and ort['first_s'] > 0 and ort['deviation'] < 1e-4
    assert 'deviation' not in times['PVTv2:b0']


def test_against_a_runtime_measures_only_its_modes():
    calls = []

    def run_compare(case, names):
        calls.append((case.mode, list(names)))
        return {case.target: dict(ms=10., iqr_ms=1., runs=3, first_s=.1),
                **{name: dict(ms=8., iqr_ms=1., runs=4, first_s=2., deviation=2e-6)
                   for name in names}}
    rows = PEERS.against(['PVTv2:b0'], [(64, 64)], ['fwd', 'train'], ['onnxruntime'],
                         run_compare, None, threads=1)
    assert calls == [('fwd', ['onnxruntime/PVTv2:b0'])]
    table = PEERS.markdown(rows)
    assert ('| PVTv2:b0 | 64x64 | fwd | onnxruntime | 10.0 | 8.0 | 0.80x | 1.0 | 1.0 | 3 / 4 | '
            '2.0 | - | - | - | 2.0e-06 |') in table

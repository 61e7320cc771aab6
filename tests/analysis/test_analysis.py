"""The analysis tools: tools/analysis/get_flops.py on configs and backbones,
tools/analysis/benchmark.py on a micro backbone (one real run), its worker
processes (tools/analysis/bench_workers.py), the dilated-attention benchmark
and the QuadTree benchmark's workers.  The library they run: tests/analysis/.

``extended``: the maintainer's operator benchmarks (.dev_scripts/op_benchmarks/), and
the ``compile`` runtime, whose inductor build takes half a minute on a cold cache
(tests/engine/test_compile.py builds one with inductor in ``make test``)."""
import csv
import math
import os
import sys
from pathlib import Path

import pytest

from vattn_mm.analysis import spec_complexity
from vattn_mm.analysis.bench import Case, Row, benchmark, fill_row, markdown, read_csv, write_csv

from ..tools import DEV_SCRIPTS, TOOLS as TOOLS_ROOT, load_tool

#: slow (the tools start their worker processes (torch + mmdet imports each))
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOOLS = TOOLS_ROOT / 'analysis'
WORKERS = load_tool('analysis/bench_workers.py')
run_case = WORKERS.run_case
GET_FLOPS = load_tool('analysis/get_flops.py')
BENCHMARK = load_tool('analysis/benchmark.py')

DEMO_CONFIG = ROOT / 'configs' / 'demo' / 'pvtv2_b0_upernet_demo.py'


@pytest.fixture(autouse=True)
def _workers_import_this_checkout(monkeypatch):
    """Worker processes run a script, so the checkout is not on their path;
    they import the vattn_mm under test, not another installed copy."""
    monkeypatch.setenv('PYTHONPATH', os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])))


def test_get_flops_on_a_config(capsys):
    assert GET_FLOPS.main([str(DEMO_CONFIG), '--shape', '64', '--depth', '1']) == 0
    out = capsys.readouterr().out
    cx = spec_complexity(str(DEMO_CONFIG), (64, 64))
    assert f'Params: {cx.params / 1e6:.2f} M' in out
    assert f'FLOPs (multiply-adds): {cx.macs / 1e9:.3f} G' in out
    # the segmentor's inference parts are listed and add up (the auxiliary
    # head only runs in training)
    parts = ['EncoderDecoder.backbone', 'EncoderDecoder.decode_head']
    assert all(p in out for p in parts) and 'auxiliary_head' not in out
    assert sum(cx.by_module[p] for p in parts) == cx.macs
    assert cx.by_module['EncoderDecoder.backbone'] == spec_complexity('PVTv2:b0', (64, 64)).macs


def test_get_flops_on_a_backbone_paper_convention(capsys):
    assert GET_FLOPS.main(['PVTv2:b2', '--imagenet']) == 0
    out = capsys.readouterr().out
    assert 'Params: 25.36 M' in out and 'FLOPs (multiply-adds): 4.027 G' in out
    assert '1x3x224x224' in out


def test_get_flops_rejects_bad_input(capsys):
    with pytest.raises(SystemExit):
        GET_FLOPS.main([])
    with pytest.raises(SystemExit):
        GET_FLOPS.main(['PVTv2:b0', '--shape', '1', '2', '3'])
    assert GET_FLOPS.main([str(DEMO_CONFIG), '--imagenet']) == 2
    assert '(--imagenet) applies to backbone specs' in capsys.readouterr().err
    assert GET_FLOPS.main(['Swin:tiny']) == 2
    assert "unknown backbone family 'Swin'" in capsys.readouterr().err


def test_benchmark_tool_on_a_micro_backbone_and_config(tmp_path, capsys):
    """One real run per mode of the tiny arch and a with_cp step of the demo
    config (64x64, one iteration), merged into one report: the CSV, markdown
    table and plot are written and the numbers are sane."""
    config = ROOT / 'configs' / 'demo' / 'pvtv2_b0_maskrcnn_demo.py'
    common = ['--shapes', '64x64', '--iters', '1', '--warmup', '0', '--threads', '1',
              '--no-progress', '--out-dir', str(tmp_path)]
    assert BENCHMARK.main(['PVTv2:b0', '--modes', 'fwd', 'train', 'train_cp', *common,
                           '--name', 'backbone']) == 0
    # (each case is a fresh process; a detector's cost there is mmdet's import)
    assert BENCHMARK.main([str(config), '--modes', 'train_cp', '--no-memory', *common,
                           '--name', 'config']) == 0
    capsys.readouterr()
    rc = BENCHMARK.main(['--merge', str(tmp_path / 'backbone.csv'), str(tmp_path / 'config.csv'),
                         '--out-dir', str(tmp_path), '--name', 'micro'])
    assert rc == 0
    with open(tmp_path / 'micro.csv') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    row, config_row = rows
    assert config_row['target'] == str(config) and config_row['error'] == ''
    assert float(config_row['gmacs']) > float(row['gmacs'])           # backbone + heads
    assert float(config_row['train_cp_ms']) > 0 and float(config_row['cp_time_ratio']) > 0
    assert (row['target'], row['shape'], row['device'], row['error']) == \
        ('PVTv2:b0', '64x64', 'cpu', '')
    cx = spec_complexity('PVTv2:b0', (64, 64))
    assert float(row['gmacs']) == pytest.approx(cx.macs / 1e9)
    for key in ('fwd_ms', 'train_ms', 'mm_gflops'):
        assert float(row[key]) > 0
    for mode in ('fwd', 'train', 'train_cp'):     # one timed block of one iteration: no spread
        assert (row[f'{mode}_runs'], float(row[f'{mode}_iqr_ms'])) == ('1', 0.), mode
    assert float(row['img_per_s']) == pytest.approx(1e3 / float(row['fwd_ms']))
    # single timed iterations: only what a measurement must be, no speed ratio
    assert 0 < float(row['fwd_frac_peak']) < math.inf
    assert float(row['fwd_peak_mib']) >= 0 and float(row['train_peak_mib']) > 0
    assert float(row['train_cp_ms']) > 0 and float(row['train_cp_peak_mib']) > 0
    assert 0 < float(row['cp_time_ratio']) < math.inf    # paired with a plain step
    assert row['threads'] == '1' and float(row['load1']) >= 0
    table = (tmp_path / 'micro.md').read_text()
    assert table.splitlines()[0].startswith('| model | input |') and '| PVTv2:b0 | 64x64 |' in table
    assert '| fwd (ms) | fwd IQR (ms) | fwd runs |' in table.splitlines()[0]
    assert table.splitlines()[0].endswith(
        '| with_cp time | with_cp peak change | mm GFLOP/s | load avg |')
    assert table in capsys.readouterr().out
    png = (tmp_path / 'micro.png').read_bytes()
    assert png[:4] == b'\x89PNG' and len(png) < 200_000


def test_failed_case_names_the_case():
    # the first line (what the report shows) ends with the worker's exception
    with pytest.raises(RuntimeError,
                       match=r'PVTv2:b9 64x64 fwd failed \(exit 1\): [^\n]*PVTv2 has no arch'):
        run_case(Case('PVTv2:b9', (64, 64), iters=1, warmup=0))


def test_case_workers_keep_their_processes_between_cases():
    """Two cases in the kept timing and memory processes give what fresh
    processes give (latency and a peak each); a failing case raises naming
    it, ends its process, and the next case runs in a new one."""
    with WORKERS.CaseWorkers() as workers:
        small = workers.run_case(Case('PVTv2:b0', (64, 64), iters=1, warmup=0))
        pids = {kind: proc.pid for kind, (proc, _) in workers._procs.items()}
        large = workers.run_case(Case('PVTv2:b0', (128, 128), 'train', iters=1, warmup=0))
        assert {kind: proc.pid for kind, (proc, _) in workers._procs.items()} == pids
        assert small.latency_ms > 0 and large.latency_ms > 0
        assert 0 < small.peak_mib < large.peak_mib and large.memory_method == 'VmHWM'
        with pytest.raises(RuntimeError, match=r'PVTv2:b9 64x64 fwd failed \(exit 1\): '
                                               r'[^\n]*PVTv2 has no arch'):
            workers.run_case(Case('PVTv2:b9', (64, 64), iters=1, warmup=0))
        assert 'time' not in workers._procs
        assert workers.run_case(Case('PVTv2:b0', (64, 64), iters=1, warmup=0),
                                memory=False).peak_mib is None
    assert not workers._procs


def test_unknown_runtime_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown runtimes \['tensorrt'\]"):
        benchmark(['PVTv2:b0'], [(64, 64)], run_case, runtimes=['tensorrt'], progress=False)


@pytest.mark.extended
def test_compiled_forward_reports_compile_time_and_deviation():
    """The compile runtime in a worker process (one mixer stage, 32x32, the
    forward only: inductor compiles once), bf16: compile time apart from the
    latency; outputs within bf16 rounding of eager fp32."""
    m = run_case(Case('Mixer:GlobalSelfAttention', (32, 32), 'fwd', dtype='bf16',
                      runtime='compile', warmup=1, iters=1, threads=1), one_process=True)
    assert m.compile_s > 0 and m.latency_ms > 0
    assert 0 < m.max_dev < 0.05


def test_onnxruntime_forward_reports_deviation():
    """The onnxruntime runtime in a worker process: exported, run, within
    float rounding of eager (its errors: tests/analysis/test_bench_measure.py)."""
    m = run_case(Case('PVTv2:b0', (64, 96), 'fwd', runtime='onnxruntime', warmup=1, iters=1,
                      threads=1), one_process=True)
    assert m.latency_ms > 0 and 0 <= m.max_dev < 1e-4


def test_time_only_cases_have_no_peak():
    m = run_case(Case('Mixer:GlobalSelfAttention', (32, 32), 'fwd', warmup=0, iters=1,
                      threads=1), memory=False)
    assert m.latency_ms > 0 and m.peak_mib is None
    row = Row('Mixer:GlobalSelfAttention', '32x32', 'cpu', 'fp32', 1., 1.)
    fill_row(row, 'fwd', m)
    assert row.fwd_ms == m.latency_ms and row.fwd_peak_mib is None
    assert row.fwd_runs == m.runs == 1 and row.fwd_iqr_ms == m.latency_iqr_ms == 0
    assert '| Mixer:GlobalSelfAttention | 32x32 |' in markdown([row])


def test_graph_breaks_flag(capsys):
    assert BENCHMARK.main(['PVTv2:b0', '--shapes', '64x64', '--modes', 'fwd',
                           '--graph-breaks']) == 0
    assert 'PVTv2:b0 fwd: 1 graph(s), 0 distinct break(s)' in capsys.readouterr().out


def test_profile_flag_tables_forward_and_backward(tmp_path, capsys):
    """``--profile N``: per case the N operators with the most self time, a
    training step's forward and backward apart."""
    assert BENCHMARK.main(['PVTv2:b0', '--shapes', '64x64', '--modes', 'fwd', 'train',
                           '--profile', '4', '--warmup', '1', '--out-dir', str(tmp_path)]) == 0
    text = (tmp_path / 'benchmark_profile.md').read_text()
    assert text == capsys.readouterr().out.strip() + '\n'
    sections = text.split('PVTv2:b0 64x64 ')[1:]
    assert [s.split(',')[0] for s in sections] == ['fwd', 'train']
    for phase in ('forward (inference)', 'forward', 'backward'):
        assert f'\n{phase}: ' in text
    # 4 operators per table, their shares below 100 %
    rows = [line for line in text.splitlines() if line.startswith('| `')]
    assert len(rows) == 3 * 4
    assert all(0 <= int(line.split('|')[-2].strip().rstrip('%')) <= 100 for line in rows)


def test_profile_under_onnxruntime_tables_its_operator_types(tmp_path, capsys):
    """``--profile`` with ``--runtime onnxruntime``: onnxruntime's own
    profiler, kernel time per operator type of its optimised graph."""
    assert BENCHMARK.main(['PVTv2:b0', '--shapes', '64x64', '--modes', 'fwd', '--runtime',
                           'onnxruntime', '--profile', '3', '--warmup', '1', '--threads', '1',
                           '--out-dir', str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith('PVTv2:b0 64x64 fwd, onnxruntime, 1 threads:')
    rows = [line.split('|') for line in text.splitlines() if line.startswith('| `')]
    assert len(rows) == 3 and any('MatMul' in row[1] for row in rows)
    times = [float(row[3]) for row in rows]
    assert times == sorted(times, reverse=True) and times[-1] > 0


def _row(target, shape, ms, peak, frac):
    return Row(target, shape, 'cpu', 'fp32', 25.4, 30.0, fwd_ms=ms, img_per_s=1e3 / ms,
               fwd_peak_mib=peak, fwd_frac_peak=frac)


def test_merge_runs(tmp_path, capsys):
    """A forward-only and a training-only run combine into one report."""
    fwd = _row('PVTv2:b2', '512x512', 400, 150, 0.5)
    train = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, train_ms=1200.,
                train_peak_mib=900., train_frac_peak=0.4, mm_gflops=80., load1=1.5)
    write_csv([fwd], tmp_path / 'fwd.csv')
    stale = _row('PVTv2:b2', '512x512', 999, 999, 0.1)          # an older forward run
    stale.load1 = 9.0
    write_csv([train, _row('P2T:small', '512x512', 380, 160, 0.55), stale],
              tmp_path / 'train.csv')
    tool = BENCHMARK
    assert tool.main(['--merge', str(tmp_path / 'fwd.csv'), str(tmp_path / 'train.csv'),
                      '--out-dir', str(tmp_path), '--name', 'all']) == 0
    rows = read_csv(tmp_path / 'all.csv')
    assert [(r.target, r.fwd_ms, r.train_ms) for r in rows] == \
        [('PVTv2:b2', 400., 1200.), ('P2T:small', 380., None)]
    assert rows[0].load1 == 1.5          # the stale row gave no value, nor its load
    assert (tmp_path / 'all.png').is_file() and '| 1200 | 900 | 40% |' in capsys.readouterr().out
    with pytest.raises(SystemExit):          # would overwrite an input
        tool.main(['--merge', str(tmp_path / 'all.csv'), '--out-dir', str(tmp_path),
                   '--name', 'all'])
    with pytest.raises(SystemExit):          # measure or merge, not both
        tool.main(['PVTv2:b0', '--merge', str(tmp_path / 'fwd.csv')])


@pytest.mark.extended
def test_dilated_attention_benchmark_runs(capsys):
    """.dev_scripts/op_benchmarks/benchmark_dilated_attention.py end to end at a small size
    (the README's numbers come from it at 800x1344)."""
    import subprocess
    res = subprocess.run(
        [sys.executable, str(DEV_SCRIPTS / 'op_benchmarks' / 'benchmark_dilated_attention.py'),
         '--arch', 'tiny', '--size', '64', '96', '--device', 'cpu', '--scope', 'stage',
         '--mode', 'inference', '--repeat', '1', '--threads', '1'],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith('| stage |')]
    assert [r.split('|')[4].strip() for r in rows] == ['unfold', 'ours'], res.stdout
    diff = float(rows[1].split('|')[-2])
    assert diff < 1e-4


@pytest.mark.extended
def test_quadtree_benchmark_workers_and_tables(capsys):
    """.dev_scripts/op_benchmarks/benchmark_quadtree.py's worker processes on one small
    dense case (the tool's own sizes take minutes), a failing case skipped,
    and the tables and linearity verdict from given results."""
    quadtree_vs_dense = load_tool('op_benchmarks/quadtree_vs_dense.py', DEV_SCRIPTS)
    tool = load_tool('op_benchmarks/benchmark_quadtree.py', DEV_SCRIPTS)
    spec = dict(device='cpu', repeat=1, threads=1, train=True, kind='dense', size=[64, 64])
    res = tool.measure_case(spec, quadtree_vs_dense.worker_env('cpu'))
    assert res['time_s'] > 0 and res['runs'] == 1 and res['peak_bytes'] >= 0, res
    failed = tool.measure_case(dict(spec, threads=0), quadtree_vs_dense.worker_env('cpu'))
    assert failed['skipped'].startswith('failed: ') and 'threads' in failed['skipped'], failed
    layer = dict(time_s=0.1, iqr_s=0.001, runs=3, peak_bytes=2**20)
    results = {('quadtree', size): dict(layer, time_s=0.1 * 4 ** i, peak_bytes=2**20 * 4 ** i)
               for i, size in enumerate(quadtree_vs_dense.SIZES[::2])}
    quadtree_vs_dense.print_tables(results, backbone=False)
    out = capsys.readouterr().out
    assert '| 512x512 | 16,384 | 100 ms (IQR 1.0, 3 runs) | 1 MiB | - | - |' in out
    assert '| quadtree | 512x512 -> 1024x1024 (4x) | 4.00x | 4.00x | yes |' in out
    assert out.endswith('(4x tokens <= 5x time and memory): yes\n')

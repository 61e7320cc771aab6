"""The analysis tools: tools/analysis/get_flops.py on configs and backbones,
tools/analysis/benchmark.py on a micro backbone (one real run) and its
reports (tools/analysis/benchlib.py)."""
import csv
import json
import os
import sys
from pathlib import Path

import pytest

from vattn_mm.analysis import spec_complexity

from .tools import TOOLS as TOOLS_ROOT, load_tool

ROOT = Path(__file__).resolve().parents[1]
TOOLS = TOOLS_ROOT / 'analysis'
benchlib = load_tool('analysis/benchlib.py')
Case, Row, markdown, parse_shape = (benchlib.Case, benchlib.Row, benchlib.markdown,
                                    benchlib.parse_shape)
plot, read_csv, run_case, write_csv = (benchlib.plot, benchlib.read_csv, benchlib.run_case,
                                       benchlib.write_csv)
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
    """One real run per mode (tiny arch and the demo config, 64x64, one
    iteration): the CSV, markdown table and plot are written and the numbers
    are sane."""
    config = ROOT / 'configs' / 'demo' / 'pvtv2_b0_maskrcnn_demo.py'
    rc = BENCHMARK.main(['PVTv2:b0', str(config), '--shapes', '64x64', '--iters', '1',
                                  '--warmup', '0', '--threads', '1', '--no-progress',
                                  '--modes', 'fwd', 'train', 'train_cp',
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
    assert float(row['img_per_s']) == pytest.approx(1e3 / float(row['fwd_ms']))
    assert 0 < float(row['fwd_frac_peak']) < 1.5
    assert float(row['fwd_peak_mib']) >= 0 and float(row['train_peak_mib']) > 0
    assert float(row['train_cp_ms']) > 0 and float(row['train_cp_peak_mib']) > 0
    assert 0.3 < float(row['cp_time_ratio']) < 5         # paired with a plain step
    assert row['threads'] == '1' and float(row['load1']) >= 0
    table = (tmp_path / 'micro.md').read_text()
    assert table.splitlines()[0].startswith('| model | input |') and '| PVTv2:b0 | 64x64 |' in table
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
    with benchlib.CaseWorkers() as workers:
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


def _row(target, shape, ms, peak, frac):
    return Row(target, shape, 'cpu', 'fp32', 25.4, 30.0, fwd_ms=ms, img_per_s=1e3 / ms,
               fwd_peak_mib=peak, fwd_frac_peak=frac)


def test_report_table_and_plot(tmp_path):
    rows = [_row('PVTv2:b2', '512x512', 400, 150, 0.5),
            _row('PVTv2:b2', '800x1344', 1500, 600, 0.45),
            _row('P2T:small', '512x512', 380, 160, 0.55),
            Row('P2T:small', '800x1344', 'cpu', 'fp32', 25.4, 30.0, error='fwd: out of memory')]
    table = markdown(rows)
    lines = table.splitlines()
    assert len([line for line in lines if line.startswith('| ')]) == 5
    assert 'train step' not in lines[0]                 # no training data, no column
    assert '| P2T:small | 800x1344 | 25.4 | 30 | - |' in table
    assert lines[-1] == '- P2T:small 800x1344: fwd: out of memory'
    plot(rows, tmp_path / 'plot.png', 'test')
    assert (tmp_path / 'plot.png').stat().st_size > 10_000


def test_growth_exponents_of_time_and_memory():
    """A cost linear in the tokens fits exponent 1, a quadratic one 2; the
    table lists models measured at three or more sizes only."""
    sides = (256, 512, 1024)
    linear = [_row('Mixer:LiteMLA', f'{s}x{s}', 10 * (s / 256) ** 2, 5 * (s / 256) ** 2, .5)
              for s in sides]
    quadratic = [_row('Mixer:GlobalSelfAttention', f'{s}x{s}', (s / 256) ** 4, 100, .5)
                 for s in sides]
    assert benchlib.growth_exponent([(1, 2.), (4, 8.)]) == pytest.approx(1.0)
    assert benchlib.growth_exponent([(1, 2.)]) is None
    table = benchlib.growth_markdown(linear + quadratic + [_row('PVTv2:b2', '512x512', 1, 1, 1)])
    assert '| Mixer:LiteMLA | 256x256 .. 1024x1024 | 1.00 / 1.00 | 1.00 / 1.00 | - | - |' in table
    assert '| Mixer:GlobalSelfAttention | 256x256 .. 1024x1024 | 2.00 / 2.00 | 0.00 / 0.00 |' \
        in table
    assert 'PVTv2:b2' not in table
    assert benchlib.growth_markdown(linear[:2]) == ''


def test_with_cp_columns_compare_with_the_plain_step():
    row = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, train_ms=1000.,
              train_peak_mib=800., train_frac_peak=0.5, train_cp_ms=1250., train_cp_peak_mib=320.,
              cp_time_ratio=1.2)
    assert row.cp_peak_change == pytest.approx(-0.6)
    assert '| 1000 | 800 | 50% | 1250 | 320 | 1.20x | -60% |' in markdown([row])
    alone = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, train_cp_ms=1250.,
                train_cp_peak_mib=320., cp_time_ratio=1.2)     # no plain peak: no change
    assert alone.cp_peak_change is None and 'with_cp peak change' not in markdown([alone])


def test_runtime_and_dtype_rows_compare_with_eager_and_fp32(tmp_path):
    """One row per (runtime, dtype): speed-ups against the eager row of the
    same dtype and the fp32 row of the same runtime; plot and growth lines
    per series; CSV round trip and merge keep the runtime apart."""
    def row(runtime, dtype, fwd, train, **extra):
        return Row('PVTv2:b2', '512x512', 'cpu', dtype, 25.4, 30.0, runtime=runtime,
                   fwd_ms=fwd, img_per_s=1e3 / fwd, train_ms=train, **extra)
    rows = [row('eager', 'fp32', 400., 1200.), row('compile', 'fp32', 320., 1000.,
                                                   fwd_compile_s=41., train_compile_s=95.,
                                                   max_dev=2e-6),
            row('eager', 'bf16', 250., 900., max_dev=8e-3),
            row('compile', 'bf16', 200., None, fwd_compile_s=40., max_dev=9e-3)]
    values = benchlib.report_values(rows)
    assert [v['fwd_vs_eager'] for v in values] == [None, 1.25, None, 1.25]
    assert [v['fwd_vs_fp32'] for v in values] == [None, None, 1.6, 1.6]
    assert [v['train_vs_eager'] for v in values] == [None, 1.2, None, None]
    table = markdown(rows)
    head = table.splitlines()[0]
    for column in ('runtime', 'dtype', 'fwd vs eager', 'fwd vs fp32', 'max dev vs fp32 eager',
                   'fwd compile (s)', 'train vs eager', 'train vs fp32', 'train compile (s)'):
        assert f'| {column} |' in head, column
    assert '| PVTv2:b2 | 512x512 | compile | bf16 |' in table
    assert [benchlib.series(r) for r in rows] == [
        'PVTv2:b2', 'PVTv2:b2 compile', 'PVTv2:b2 bf16', 'PVTv2:b2 compile bf16']
    write_csv(rows, tmp_path / 'r.csv')
    back = read_csv(tmp_path / 'r.csv')
    assert [(r.runtime, r.dtype, r.max_dev) for r in back] == \
        [(r.runtime, r.dtype, r.max_dev) for r in rows]
    assert len(benchlib.merge_rows(back + back)) == 4
    plain = markdown([rows[0]]).splitlines()[0]        # one runtime and dtype: no such columns
    assert '| runtime |' not in plain and 'vs eager' not in plain and 'vs fp32' not in plain


def test_unknown_runtime_and_mode_are_clear_errors():
    with pytest.raises(ValueError, match=r"unknown runtimes \['tensorrt'\]"):
        benchlib.benchmark(['PVTv2:b0'], [(64, 64)], runtimes=['tensorrt'], progress=False)
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'"):
        benchlib.measure(Case('PVTv2:b0', (64, 64), runtime='tensorrt'))
    only_fwd = benchlib.Runtime(benchlib._eager, modes=('fwd', ))
    benchlib.RUNTIMES['fwd_only'] = only_fwd
    try:
        with pytest.raises(ValueError, match="runtime 'fwd_only' cannot measure mode 'train'"):
            benchlib.measure(Case('PVTv2:b0', (64, 64), mode='train', runtime='fwd_only'))
    finally:
        del benchlib.RUNTIMES['fwd_only']


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
    float rounding of eager; training and bf16 are clear errors."""
    m = run_case(Case('PVTv2:b0', (64, 96), 'fwd', runtime='onnxruntime', warmup=1, iters=1,
                      threads=1), one_process=True)
    assert m.latency_ms > 0 and 0 <= m.max_dev < 1e-4
    with pytest.raises(ValueError, match="runtime 'onnxruntime' cannot measure mode 'train'"):
        benchlib.measure(Case('PVTv2:b0', (64, 64), mode='train', runtime='onnxruntime'))
    with pytest.raises(ValueError, match='onnxruntime measures fp32 on the CPU, not bf16'):
        benchlib.measure(Case('PVTv2:b0', (64, 64), dtype='bf16', runtime='onnxruntime'))


def test_time_only_cases_have_no_peak():
    m = run_case(Case('Mixer:GlobalSelfAttention', (32, 32), 'fwd', warmup=0, iters=1,
                      threads=1), memory=False)
    assert m.latency_ms > 0 and m.peak_mib is None
    row = benchlib.Row('Mixer:GlobalSelfAttention', '32x32', 'cpu', 'fp32', 1., 1.)
    benchlib.fill_row(row, 'fwd', m)
    assert row.fwd_ms == m.latency_ms and row.fwd_peak_mib is None
    assert '| Mixer:GlobalSelfAttention | 32x32 |' in benchlib.markdown([row])


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


@pytest.mark.parametrize('text,shape', [('800x1344', (800, 1344)), ('512', (512, 512)),
                                        ('64X96', (64, 96))])
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize('text', ['800x', 'axb', '0x10', '1x2x3'])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError, match='bad input size'):
        parse_shape(text)


PEAK_PROBE = """
import json, torch
from benchlib import PeakMemory
keep = [torch.ones(2**20) for _ in range(64)]   # 256 MiB alive before: not counted
del keep                                         # and freed: must not count either
with PeakMemory('cpu') as peak:
    buf = torch.ones(16 * 2**20)                 # 64 MiB, touched, freed inside
    del buf
    small = [torch.ones(2**20) for _ in range(8)]  # 32 MiB alive at exit
print(json.dumps(dict(bytes=peak.bytes, method=peak.method)))
"""


def _memory_probe(script: str) -> dict:
    """The JSON that ``script`` prints last, run in a process started the
    way the memory workers are."""
    import subprocess

    env = benchlib.memory_worker_env()
    env['PYTHONPATH'] = os.pathsep.join([str(TOOLS), env['PYTHONPATH']])
    res = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_peak_memory_sees_a_transient_buffer():
    """What the benchmarks report, in a process started the way the memory
    workers are: a 64 MiB buffer allocated and freed inside the block shows
    as 64 MiB (not more: memory freed before the block does not count)."""
    peak = _memory_probe(PEAK_PROBE)
    assert peak['method'] in ('VmHWM', 'ru_maxrss')
    if peak['method'] == 'VmHWM':
        assert 60 * 2**20 < peak['bytes'] < 80 * 2**20, peak


PARTS_PROBE = """
import json, torch
from torch import nn
from benchlib import peaks_of

class Transient(nn.Module):
    def __init__(self, mib):
        super().__init__()
        self.mib = mib
    def forward(self, x):
        buf = torch.ones(self.mib * 2**18)       # touched, freed before returning
        return x + buf[:1]

big, small = Transient(96), Transient(16)
model = nn.Sequential(Transient(8), big, Transient(8), small)   # the big one in the middle
peak, parts = peaks_of(lambda: model(torch.zeros(1)), 'cpu', dict(mixer=[big, small]))
print(json.dumps(dict(total=peak.bytes / 2**20, mixer=parts['mixer'], method=peak.method)))
"""


def test_part_peaks_keep_the_whole_peak():
    """A part's own peak is measured by resetting the high-water mark at its
    start; the enclosing peak still sees an earlier part's transient."""
    peak = _memory_probe(PARTS_PROBE)
    if peak['method'] == 'VmHWM':
        assert 90 < peak['mixer'] < 110 and 90 < peak['total'] < 110, peak


FREED_FIRST_PROBE = PARTS_PROBE.split('big, small =')[0] + """
held = [torch.ones(48 * 2**18)]             # 48 MiB resident before the step

def step():
    held.clear()                            # the step frees it first: 48 MiB lower
    model(torch.zeros(1))

model = nn.Sequential(Transient(32))        # 32 MiB above its start, 16 below the step's
peak, parts = peaks_of(step, 'cpu', dict(mixer=list(model)))
print(json.dumps(dict(total=peak.bytes / 2**20, mixer=parts['mixer'], method=peak.method)))
"""


def test_part_peak_is_counted_from_the_step_start_at_least():
    """A part that runs after the step freed memory it held on entry is
    counted from the step's entry level: never above the step's own peak."""
    peak = _memory_probe(FREED_FIRST_PROBE)
    if peak['method'] == 'VmHWM':
        assert peak['mixer'] <= peak['total'] < 1, peak


KEEPER_PROBE = """
import json, torch
from torch import nn
from benchlib import Case, measure
from vattn_mm.analysis import Target

class Keeper(nn.Module):
    # allocates a 64 MiB workspace in its first step and keeps it
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))
        self.workspace = None
    def forward(self, x):
        if self.workspace is None:
            self.workspace = torch.ones(64 * 2**18)
        return x * self.weight + self.workspace[:1]

def build(name, with_cp=False, device='cpu'):
    model = Keeper()
    return Target(name, model, model)

print(json.dumps(measure(Case('keeper', (8, 8), 'train', builder='__main__:build'), ('memory', ))))
"""


def test_training_peak_counts_memory_kept_between_steps():
    """A layer that keeps a buffer from its first step on: the reported peak
    is the memory held since the model was built plus a steady step's own
    peak, so the 64 MiB count (a steady step's peak alone would miss them)."""
    out = _memory_probe(KEEPER_PROBE)
    if out['memory_method'] == 'VmHWM':
        assert 60 < out['held_mib'] < 70 and out['step_peak_mib'] < 8, out
        assert out['peak_mib'] == pytest.approx(out['held_mib'] + out['step_peak_mib'])
        assert 60 < out['first_peak_mib'] < 75, out


def test_peak_memory_refuses_a_process_without_mmap_malloc(monkeypatch):
    """Started without the malloc settings, glibc's free heap chunks would
    count as resident: PeakMemory says so instead of overstating."""
    MMAP_MALLOC_ENV, PeakMemory = benchlib.MMAP_MALLOC_ENV, benchlib.PeakMemory
    for key in MMAP_MALLOC_ENV:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match='MALLOC_MMAP_THRESHOLD_'):
        with PeakMemory('cpu'):
            pass


def test_dilated_attention_benchmark_runs(capsys):
    """tools/analysis/benchmark_dilated_attention.py end to end at a small size
    (the README's numbers come from it at 800x1344)."""
    import subprocess
    res = subprocess.run(
        [sys.executable, str(TOOLS / 'benchmark_dilated_attention.py'),
         '--arch', 'tiny', '--size', '64', '96', '--device', 'cpu', '--scope', 'stage',
         '--mode', 'inference', '--repeat', '1', '--threads', '1'],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith('| stage |')]
    assert [r.split('|')[4].strip() for r in rows] == ['unfold', 'ours'], res.stdout
    diff = float(rows[1].split('|')[-2])
    assert diff < 1e-4

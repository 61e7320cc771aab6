"""vattn_mm.analysis.bench in one process: the timing method, the peak-memory
meter (in processes started the way the memory workers are), clear errors
for cases it cannot measure, and an import that changes nothing."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vattn_mm.analysis.bench import (MMAP_MALLOC_ENV, RUNTIMES, Case, PeakMemory, Runtime,
                                     measure, memory_worker_env, time_steps)
from vattn_mm.analysis.bench.runtimes import eager

#: slow (each measurement runs in a fresh worker process)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_time_steps_reports_median_spread_and_runs():
    """Two steps timed in alternating blocks: each its own median, a spread,
    and at least the asked number of timed iterations."""
    times = time_steps({'short': lambda: time.sleep(0.01), 'long': lambda: time.sleep(0.03)},
                       iters=3, rounds=2)
    assert 0.01 <= times['short'].median_s < times['long'].median_s
    assert all(t.runs >= 3 and t.iqr_s >= 0 for t in times.values())
    one, = time_steps({'one': lambda: time.sleep(0.01)}, iters=1).values()
    assert one.runs == 1 and one.iqr_s == 0
    with pytest.raises(ValueError, match='iters >= 1'):
        time_steps({'one': lambda: None}, iters=0)


def test_unknown_runtime_and_mode_are_clear_errors():
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'"):
        measure(Case('PVTv2:b0', (64, 64), runtime='tensorrt'))
    RUNTIMES['fwd_only'] = Runtime(eager, modes=('fwd', ))
    try:
        with pytest.raises(ValueError, match="runtime 'fwd_only' cannot measure mode 'train'"):
            measure(Case('PVTv2:b0', (64, 64), mode='train', runtime='fwd_only'))
    finally:
        del RUNTIMES['fwd_only']
    with pytest.raises(ValueError, match="runtime 'onnxruntime' cannot measure mode 'train'"):
        measure(Case('PVTv2:b0', (64, 64), mode='train', runtime='onnxruntime'))
    with pytest.raises(ValueError, match='onnxruntime measures fp32 on the CPU, not bf16'):
        measure(Case('PVTv2:b0', (64, 64), dtype='bf16', runtime='onnxruntime'))


def test_peak_memory_refuses_a_process_without_mmap_malloc(monkeypatch):
    """Started without the malloc settings, glibc's free heap chunks would
    count as resident: PeakMemory says so instead of overstating."""
    for key in MMAP_MALLOC_ENV:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match='MALLOC_MMAP_THRESHOLD_'):
        with PeakMemory('cpu'):
            pass


IMPORT_PROBE = """
import json, os, sys
import torch
import vattn_mm   # what the package and its frameworks set up is test_guest_import's
before = dict(env=dict(os.environ), threads=torch.get_num_threads(), path=list(sys.path))
import vattn_mm.analysis.bench
after = dict(env=dict(os.environ), threads=torch.get_num_threads(), path=list(sys.path))
print(json.dumps(dict(same=before == after, mmap=vattn_mm.analysis.bench.mmap_malloc_active())))
"""


def test_import_changes_no_process_state():
    """Importing the library sets up nothing more than the package does: the
    glibc settings are the worker process's environment, given by the tool
    that starts it."""
    out = _probe(IMPORT_PROBE, dict(os.environ))
    assert out == dict(same=True, mmap=False)


def _probe(script: str, env: dict) -> dict:
    """The JSON that ``script`` prints last, run in a fresh interpreter."""
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    res = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def _memory_probe(script: str) -> dict:
    """``script`` run in a process started the way the memory workers are."""
    return _probe(script, memory_worker_env())


PEAK_PROBE = """
import json, torch
from vattn_mm.analysis.bench import PeakMemory
keep = [torch.ones(2**20) for _ in range(64)]   # 256 MiB alive before: not counted
del keep                                         # and freed: must not count either
with PeakMemory('cpu') as peak:
    buf = torch.ones(16 * 2**20)                 # 64 MiB, touched, freed inside
    del buf
    small = [torch.ones(2**20) for _ in range(8)]  # 32 MiB alive at exit
print(json.dumps(dict(bytes=peak.bytes, method=peak.method)))
"""


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
from vattn_mm.analysis.bench import peaks_of

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
from vattn_mm.analysis import Target
from vattn_mm.analysis.bench import Case, measure

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

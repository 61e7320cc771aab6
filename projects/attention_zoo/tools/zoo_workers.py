"""The attention zoo's training processes (library:
:mod:`attention_zoo.runs`).  Imported by ``zoo.py`` to start them
(:func:`train_and_test`, :func:`design_runs`); run as a script it is one:

    python projects/attention_zoo/tools/zoo_workers.py --train SPEC_JSON   # one accuracy run
    python projects/attention_zoo/tools/zoo_workers.py --probe SPEC_JSON   # one probe design's runs
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

import project_paths  # noqa: F401  (before the imports below)
from bench_workers import WorkerError, worker_reply

from attention_zoo import SCALES, Accuracy, ProbeRun, train_and_test_here
from attention_zoo.runs import PROBE_TAG, probe_worker

SCRIPT = str(Path(__file__).resolve())


def train_and_test(variant: str, task: str, seed: int, *, data_root: Path, iters: int,
                   quick: bool, work_dir: Path, timeout: Optional[float],
                   threads: Optional[int] = None) -> Accuracy:
    """:func:`attention_zoo.train_and_test_here` in a fresh process
    (a crash costs one run) with ``threads`` torch threads (None: torch's
    default)."""
    run_dir = work_dir / f'{variant}_{task}_seed{seed}'
    spec = dict(variant=variant, task=task, seed=seed, data_root=str(data_root), iters=iters,
                quick=quick, work_dir=str(run_dir), threads=threads)
    try:
        out = worker_reply([sys.executable, SCRIPT, '--train', json.dumps(spec)],
                           f'{variant} {task} seed {seed}', timeout=timeout)
    except subprocess.TimeoutExpired:
        return Accuracy(variant, task, seed, {}, error=f'timed out after {timeout:.0f} s')
    except WorkerError as err:
        return Accuracy(variant, task, seed, {}, error=f'exit {err.code}: {err.last_line}')
    finally:
        for ckpt in run_dir.rglob('*.pth'):      # the logs stay; checkpoints add up
            ckpt.unlink()
    return Accuracy(variant, task, seed, out['metrics'], out['train_s'])


def resident_mib(pid: int) -> float:
    """Another process's resident size (``VmRSS``; the package reads only
    its own process's, :mod:`vattn_mm.analysis.bench.memory`); 0 where
    ``/proc`` cannot tell."""
    try:
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.


def design_runs(design: str, runs: Sequence, *, scale: str, device: str, threads: int,
                memory_mib: float, deadline: float) -> list[ProbeRun]:
    """:func:`attention_zoo.runs.probe_worker` of ``design`` in a
    fresh process, killed where its resident memory passes ``memory_mib`` or
    the clock passes ``deadline``; the runs it did not finish carry the reason."""
    spec = dict(design=design, runs=runs, scale=asdict(SCALES[scale]), device=device,
                threads=threads)
    errors = tempfile.TemporaryFile('w+')     # a pipe could fill and stall the worker
    proc = subprocess.Popen([sys.executable, SCRIPT, '--probe', json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=errors, text=True,
                            env={**os.environ, 'OMP_NUM_THREADS': str(threads)})
    stopped: list = []

    def watch() -> None:
        while proc.poll() is None:
            rss = resident_mib(proc.pid)
            if rss > memory_mib:
                stopped.append(f'stopped: resident memory {rss:.0f} MiB passed the cap of '
                               f'{memory_mib:.0f} MiB')
            elif time.monotonic() > deadline:
                stopped.append('stopped: the study\'s time budget was spent')
            if stopped:
                proc.kill()
                return
            time.sleep(0.2)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    done = [ProbeRun(**json.loads(line[len(PROBE_TAG):]))
            for line in proc.stdout if line.startswith(PROBE_TAG)]
    proc.wait()
    watcher.join()
    errors.seek(0)
    stderr = errors.read()
    errors.close()
    if len(done) < len(runs):
        lines = stderr.strip().splitlines()
        why = stopped[0] if stopped else (f'exit {proc.returncode}: '
                                         f'{lines[-1] if lines else "no output"}')
        done += [ProbeRun(design, p, s, error=why) for p, s in runs[len(done):]]
    return done


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description='attention zoo worker (started by zoo.py)')
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument('--train', metavar='SPEC_JSON', help='train and test one variant')
    task.add_argument('--probe', metavar='SPEC_JSON', help='one probe design\'s runs')
    args = parser.parse_args(argv)
    if args.train:
        print(json.dumps(train_and_test_here(json.loads(args.train))))
    else:
        probe_worker(json.loads(args.probe))


if __name__ == '__main__':
    main()

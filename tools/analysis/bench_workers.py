"""The benchmark tools' worker processes (library:
:mod:`vattn_mm.analysis.bench`).  Imported by the tools of this folder to
start them (:func:`run_case`, :class:`CaseWorkers`, :func:`run_compare`);
run as a script it is a worker (the tools start CPU memory workers with
glibc unmapping freed blocks, :func:`vattn_mm.analysis.bench.memory_worker_env`):

    python tools/analysis/bench_workers.py --worker CASE_JSON [--parts time memory]
    python tools/analysis/bench_workers.py --serve          # a request per stdin line
    python tools/analysis/bench_workers.py --compare CASE_JSON PEER ...   # benchmark.py --against

Tools whose own scripts are workers start them with :func:`worker_reply`, and
those that measure memory call :func:`exec_with_mmap_malloc` first.
"""
from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from vattn_mm.analysis.bench import Case, Measurement, measure, memory_worker_env
from vattn_mm.analysis.bench.memory import mmap_malloc_active
from vattn_mm.analysis.bench.worker import (case_from_json, case_to_json, combine, reply_of,
                                            request_line, serve)

SCRIPT = str(Path(__file__).resolve())
#: what measuring a case raises where it fails or passes its timeout
CASE_ERRORS = (RuntimeError, subprocess.TimeoutExpired)


def exec_with_mmap_malloc() -> None:
    """Restart this process (same command line) with the glibc settings of
    :data:`vattn_mm.analysis.bench.MMAP_MALLOC_ENV` unless it already has
    them: the first call of a CPU memory worker."""
    if not mmap_malloc_active():
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], memory_worker_env())


class WorkerError(RuntimeError):
    """A worker process that failed: its exit status (``code``) and the end
    of its standard error (``lines``; ``last_line``, the error itself)."""

    def __init__(self, what: str, code: int, stderr: str):
        self.code = code
        self.lines = stderr.strip().splitlines()[-15:]
        self.last_line = self.lines[-1] if self.lines else 'no output'
        super().__init__(f'{what} failed (exit {code}): {self.last_line}\n'
                         + '\n'.join(self.lines))


def worker_reply(cmd: Sequence[str], what: str, *, env: Optional[dict] = None,
                 timeout: Optional[float] = None) -> dict:
    """Run ``cmd`` to its end; the JSON object its last output line holds.
    Raises :class:`WorkerError` (naming ``what``) if it fails or prints
    nothing, ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    res = subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout,
                         check=False)
    lines = res.stdout.strip().splitlines()
    if res.returncode or not lines:
        raise WorkerError(what, res.returncode, res.stderr)
    return json.loads(lines[-1])


def run_worker(case: Case, parts: Sequence[str], env: dict,
               timeout: Optional[float] = None) -> dict:
    """Measure ``parts`` of ``case`` in a fresh interpreter running this file."""
    return worker_reply([sys.executable, SCRIPT, '--worker', case_to_json(case), '--parts',
                         *parts], case.label, env=env, timeout=timeout)


def run_case(case: Case, timeout: Optional[float] = None,
             one_process: bool = False, memory: bool = True) -> Measurement:
    """Measure ``case`` in fresh interpreters: time and CUDA memory in one, CPU
    memory in a second one with glibc unmapping freed blocks.
    ``one_process``: CPU time and memory in that one process (half the
    start-ups; the time then includes the page faults of unmapped blocks:
    for smoke runs, not for reports).  ``memory=False``: time only."""
    if one_process and memory and not case.device.startswith('cuda'):
        return Measurement(**run_worker(case, ('time', 'memory'), memory_worker_env(), timeout))
    return combine(case, memory, lambda parts, env: run_worker(case, parts, env, timeout))


def peak_mib(case: Case) -> float:
    """The peak memory (MiB) of ``case`` in a fresh memory process."""
    return run_worker(case, ('memory', ), memory_worker_env())['peak_mib']


class CaseWorkers:
    """:func:`run_case` with its interpreters kept for the next case: one
    timing and one memory process (started on first use), each measuring
    the cases sent to it one after another, every case with its own freshly
    built model.  Saves an interpreter start-up (several seconds of imports)
    per case and process where a series of cases runs, e.g. one model at
    growing sizes.  A case that fails or passes ``timeout`` ends its process
    (the next case starts a fresh one) and raises as :func:`run_case` does.
    Use as a context manager; :meth:`close` ends the processes."""

    errors = CASE_ERRORS

    def __init__(self) -> None:
        self._procs: dict = {}

    def __enter__(self) -> 'CaseWorkers':
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for kind in list(self._procs):
            self._stop(kind)

    def _stop(self, kind: str) -> str:
        """End the ``kind`` process; returns the tail of its stderr."""
        proc, err = self._procs.pop(kind)
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err.seek(0)
        tail = err.read().decode(errors='replace').strip().splitlines()[-15:]
        err.close()
        return '\n'.join(tail)

    def _ask(self, kind: str, case: Case, parts: Sequence[str], env: dict,
             timeout: Optional[float]) -> dict:
        if kind not in self._procs:
            err = tempfile.TemporaryFile()
            proc = subprocess.Popen([sys.executable, SCRIPT, '--serve'], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    text=True, bufsize=1)
            self._procs[kind] = (proc, err)
        proc = self._procs[kind][0]
        proc.stdin.write(request_line(case, parts))
        proc.stdin.flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0 or not sel.select(left):
                    proc.kill()
                    self._stop(kind)
                    raise subprocess.TimeoutExpired(f'{case.target} {case.mode}', timeout)
                line = proc.stdout.readline()
                if not line:
                    code = proc.wait()
                    raise WorkerError(case.label, code, self._stop(kind))
                reply = reply_of(line)
                if reply is not None:
                    return reply

    def run_case(self, case: Case, timeout: Optional[float] = None,
                 memory: bool = True) -> Measurement:
        """:func:`run_case` (two processes on CPU) in the kept processes."""
        return combine(case, memory, lambda parts, env: self._ask(
            'memory' if parts == ('memory', ) else 'time', case, parts, env, timeout))


def run_compare(case: Case, peers: Sequence[str], timeout: Optional[float] = None) -> dict:
    """:func:`vattn_mm.analysis.bench.peers.compare` in a fresh interpreter."""
    return worker_reply([sys.executable, SCRIPT, '--compare', case_to_json(case), *peers],
                        case.label, timeout=timeout)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description='benchmark worker (started by the tools)')
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument('--worker', metavar='CASE_JSON', help='measure one case')
    task.add_argument('--serve', action='store_true', help='measure a case per stdin line')
    task.add_argument('--compare', metavar='CASE_JSON', help='time ours against PEERS')
    parser.add_argument('peers', nargs='*', help='--compare: peer names')
    parser.add_argument('--parts', nargs='+', choices=('time', 'memory'),
                        default=['time', 'memory'])
    args = parser.parse_args(argv)
    if args.serve:
        serve(sys.stdin, lambda line: print(line, end='', flush=True))
    elif args.compare:
        from vattn_mm.analysis.bench.peers import compare
        print(json.dumps(compare(case_from_json(args.compare), args.peers)))
    else:
        print(json.dumps(measure(case_from_json(args.worker), args.parts)))


if __name__ == '__main__':
    main()

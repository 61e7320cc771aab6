"""The protocol between a benchmark tool and its worker processes (started
by ``tools/analysis/bench_workers.py``): which processes a case needs
(:func:`combine`), a request per line, a reply per request (:func:`serve`)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Callable, Iterable, Optional, Sequence

from .cases import Case, Measurement
from .measure import measure
from .memory import memory_worker_env

#: what starts a reply line (a worker's other output is not a reply)
REPLY = '@@bench-result '
#: what a CPU memory process reports
MEMORY_KEYS = ('peak_mib', 'memory_method', 'part_peaks_mib', 'held_mib', 'step_peak_mib',
               'first_peak_mib')


def case_to_json(case: Case) -> str:
    return json.dumps(asdict(case))


def case_from_json(text: str) -> Case:
    return case_from_dict(json.loads(text))


def case_from_dict(spec: dict) -> Case:
    return Case(**dict(spec, shape=tuple(spec['shape'])))


def request_line(case: Case, parts: Sequence[str]) -> str:
    """One request to :func:`serve`: measure ``parts`` of ``case``."""
    return json.dumps(dict(case=asdict(case), parts=list(parts))) + '\n'


def reply_of(line: str) -> Optional[dict]:
    """The measurement a reply line carries; None for another line."""
    return json.loads(line[len(REPLY):]) if line.startswith(REPLY) else None


def serve(requests: Iterable[str], reply: Callable[[str], None]) -> None:
    """A kept worker's loop: each request line measured in this process, the
    reply passed to ``reply``; a failing case raises (the process ends)."""
    for line in requests:
        request = json.loads(line)
        out = measure(case_from_dict(request['case']), request['parts'])
        reply(REPLY + json.dumps(out) + '\n')


def combine(case: Case, memory: bool, ask: Callable[[tuple, dict], dict]) -> Measurement:
    """The processes a case needs, each asked by ``ask(parts, env)``: time
    only; time and CUDA memory in one; CPU time, then CPU memory in a
    process with :data:`.memory.MMAP_MALLOC_ENV` (timing in that mode would
    add a page fault per page of every large temporary)."""
    if not memory:
        return Measurement(**ask(('time', ), dict(os.environ)), peak_mib=None, memory_method='')
    if case.device.startswith('cuda'):
        return Measurement(**ask(('time', 'memory'), dict(os.environ)))
    timed = ask(('time', ), dict(os.environ))
    peak = ask(('memory', ), memory_worker_env())
    return Measurement(**{**timed, **{k: peak[k] for k in MEMORY_KEYS if k in peak}})

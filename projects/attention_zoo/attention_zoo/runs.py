"""The zoo's training runs: every accuracy run (variant, task, seed) and
every design of the probe study, ``args.jobs`` at a time, each in a process
that the tool starts (``projects/attention_zoo/tools/zoo_workers.py``), their CSV rewritten
as each ends; and what a probe process runs (:func:`probe_worker`)."""
from __future__ import annotations

import argparse
import json
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from .accuracy import TASKS, Accuracy
from .probe_study import ProbeRun, Scale, axis_probes, designs, planned, run_probe
from .study_report import write_dataclass_csv

#: what a probe process prints before each run's JSON
PROBE_TAG = 'PROBE_RUN '


def accuracy_runs(args: argparse.Namespace, root: Path, out: Path,
                  train_and_test: Callable[..., Accuracy]) -> list[Accuracy]:
    """Every (variant, task, seed) trained and tested on the demo data under
    ``root`` by ``train_and_test(variant, task, seed, data_root=, iters=,
    quick=, work_dir=, timeout=, threads=)`` (in a process of its own),
    ``args.jobs`` at a time; ``zoo_accuracy.csv`` rewritten (in the order of
    the runs) as each ends."""
    jobs = [(variant, task, seed) for variant in args.variants for task in TASKS
            for seed in args.seeds]
    threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    done: dict = {}

    def run(job: tuple) -> Accuracy:
        variant, task, seed = job
        print(f'[zoo] accuracy: {variant} {task} seed {seed}', flush=True)
        return train_and_test(variant, task, seed, data_root=root, quick=args.quick,
                              iters=args.seg_iters if task == 'seg' else args.det_iters,
                              work_dir=out / 'runs', timeout=args.train_timeout,
                              threads=threads)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run, job): job for job in jobs}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            write_dataclass_csv([done[j] for j in jobs if j in done],
                                out / 'zoo_accuracy.csv', Accuracy)
    return [done[j] for j in jobs]


def probe_worker(spec: dict) -> None:
    """Every (probe, seed) of one design in this process, one line each as
    it ends, :data:`PROBE_TAG` and the run as JSON (a failed run is reported
    and the next one runs)."""
    import torch
    torch.set_num_threads(spec['threads'])
    scale = Scale(**spec['scale'])
    for probe, seed in spec['runs']:
        try:
            run = run_probe(spec['design'], probe, seed, scale, spec['device'])
        except Exception as e:  # noqa: BLE001  (recorded in the CSV; the next run goes on)
            run = ProbeRun(spec['design'], probe, seed, error=f'{type(e).__name__}: {e}')
        run.peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(PROBE_TAG + json.dumps(run.__dict__), flush=True)


def probe_runs(args: argparse.Namespace, out: Path,
               design_runs: Callable[..., list[ProbeRun]]) -> list[ProbeRun]:
    """The probe study: every design of ``args.axes`` on the probes the
    scale plans for it (:func:`~.probe_study.planned`), its runs by
    ``design_runs(design, [[probe, seed], ...], scale=, device=, threads=,
    memory_mib=, deadline=)`` (:func:`probe_worker` in a process of its own,
    stopped past ``memory_mib`` or the ``time.monotonic()`` ``deadline``),
    ``args.jobs`` at a time; ``zoo_probes.csv`` rewritten as each design ends."""
    jobs = []
    for axis in args.axes:
        probes = [p for p in axis_probes(axis) if p in args.probes]
        for design in designs(axis, args.variants, args.positions, args.tokenisers,
                              args.windows):
            runs = [[p, s] for s in args.probe_seeds for p in probes   # seed-major
                    if planned(design, p, args.scale, named=args.named_probes)]
            if runs:
                jobs.append((design, runs))
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    deadline = time.monotonic() + args.time_budget_min * 60
    done: dict = {}

    def run(job: tuple) -> list[ProbeRun]:
        print(f'[zoo] probes: {job[0]} ({len(job[1])} runs)', flush=True)
        return design_runs(*job, scale=args.scale, device=args.device, threads=threads,
                           memory_mib=args.probe_memory_mib, deadline=deadline)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run, job): job[0] for job in jobs}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            write_dataclass_csv([r for d, _ in jobs if d in done for r in done[d]],
                                out / 'zoo_probes.csv', ProbeRun)
    return [r for d, _ in jobs for r in done[d]]

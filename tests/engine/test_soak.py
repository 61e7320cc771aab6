"""The soak (``make test-soak``; not part of ``make test``): the demo Mask
R-CNN on 64x64 images with 2 data workers trains 2,000 iterations through
tools/train.py while the test samples its resident memory (the main process
and its workers) and open file descriptors; after a warm-up of 200 iterations
neither grows by more than 5 % (median of iterations 200-600 against median
of the last 400). The figures are printed and written to ``soak.json``."""
import json
import os
import re
import statistics
import time
from pathlib import Path

import pytest

from .test_exact_resume import demo64, maskrcnn_config  # noqa: F401
from .test_reliability import finish, start, train_cmd

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not os.environ.get('VATTN_SOAK'), reason='the soak runs with make test-soak (about 20 min)')]

#: ``VATTN_SOAK_ITERS`` shortens it for a try of the test itself
ITERS = int(os.environ.get('VATTN_SOAK_ITERS', 2000))
WARM_UP, WINDOW = ITERS // 10, ITERS // 5


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its children (data workers), KiB."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f'/proc/{current}/status').read_text()
            total += int(re.search(r'VmRSS:\s+(\d+)', status).group(1))
            for task in Path(f'/proc/{current}/task').iterdir():
                todo += [int(c) for c in (task / 'children').read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


def test_memory_and_open_files_stay_flat_over_2000_iterations(demo64, tmp_path):  # noqa: F811
    config = maskrcnn_config(tmp_path, demo64, workers=2)
    log = tmp_path / 'soak.log'
    run = start(train_cmd(config, tmp_path / 'work', '--cfg-options', f'train_cfg.max_iters={ITERS}',
                          f'train_cfg.val_interval={ITERS}', 'default_hooks.checkpoint.interval=100',
                          'default_hooks.logger.interval=10'), log)
    samples, started = [], time.monotonic()
    while run.poll() is None:
        done = re.findall(r'Iter\(train\) \[\s*(\d+)/', log.read_text())
        if done:
            fds = len(os.listdir(f'/proc/{run.pid}/fd')) if run.poll() is None else 0
            samples.append((int(done[-1]), rss_kib(run.pid), fds))
        time.sleep(2)
    finish(run, log, timeout=60)
    early = [s for s in samples if WARM_UP <= s[0] < WARM_UP + WINDOW and s[2]]
    late = [s for s in samples if s[0] > ITERS - WINDOW and s[2]]
    figures = {'iterations': ITERS, 'minutes': round((time.monotonic() - started) / 60, 1),
               'samples': len(samples)}
    for i, name in ((1, 'rss_mib'), (2, 'open_fds')):
        before = statistics.median(s[i] for s in early)
        after = statistics.median(s[i] for s in late)
        scale = 1024 if name == 'rss_mib' else 1
        figures[name] = dict(after_warm_up=round(before / scale, 1), last=round(after / scale, 1),
                             growth=round(after / before - 1, 4))
    (tmp_path / 'soak.json').write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    assert figures['rss_mib']['growth'] <= 0.05 and figures['open_fds']['growth'] <= 0.05, figures

"""The suite's own guards, tried in a child pytest."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collect(tmp_path, disk_gib: str) -> subprocess.CompletedProcess:
    env = {**os.environ, 'VATTN_TEST_DISK_GIB': disk_gib}
    env.pop('PYTEST_XDIST_WORKER', None)
    return subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', '-p', 'no:xdist', '--collect-only', '-q',
         '--basetemp', str(tmp_path / 'base'), 'tests/project/test_suite_guards.py'],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_disk_too_small_for_the_suite_stops_it_at_once_naming_the_folder(tmp_path):
    run = collect(tmp_path, '1e9')
    assert run.returncode == 3, run.stdout + run.stderr
    assert f'{tmp_path} has' in run.stdout and 'writes up to 1e+09 GiB' in run.stdout, run.stdout
    run = collect(tmp_path, '0')
    assert run.returncode == 0, run.stdout + run.stderr

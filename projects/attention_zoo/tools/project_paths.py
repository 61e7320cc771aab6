"""Imported first by the project's scripts: puts the project (the
``attention_zoo`` package) and the library's analysis tools (``bench_workers``,
``erf``) on the import path of this process and of the processes it starts
(the benchmark's workers build the zoo's variants)."""
import os
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
PATHS = [str(PROJECT), str(PROJECT.parents[1] / 'tools' / 'analysis')]
sys.path[1:1] = [p for p in PATHS if p not in sys.path]
os.environ['PYTHONPATH'] = os.pathsep.join(
    [*PATHS, *filter(None, [os.environ.get('PYTHONPATH')])])

"""The benchmark's worker processes (``tools/analysis/bench_workers.py``) for
the scripts of this folder, which import it as a sibling: this module
becomes that file's module."""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    __name__, Path(__file__).resolve().parents[2] / 'tools' / 'analysis' / 'bench_workers.py')
_module = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _module
_spec.loader.exec_module(_module)

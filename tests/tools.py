"""Scripts under tools/ imported as modules by the tests."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / 'tools'


def load_tool(relative: str) -> ModuleType:
    """``tools/<relative>`` as a module, registered under its file name (the
    analysis scripts import ``bench_workers`` so, as a sibling)."""
    path = TOOLS / relative
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], '__file__', None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

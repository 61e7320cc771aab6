"""Scripts under tools/ and .dev_scripts/ imported as modules by the tests."""
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / 'tools'
#: the maintainer scripts (outside the wheel)
DEV_SCRIPTS = ROOT / '.dev_scripts'


def load_tool(relative: str, root: Path = TOOLS) -> ModuleType:
    """``<root>/<relative>`` as a module, registered under its file name (the
    analysis scripts import ``bench_workers`` so, as a sibling)."""
    path = root / relative
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], '__file__', None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def dev_package(name: str) -> ModuleType:
    """The package ``.dev_scripts/<name>`` (imported as its scripts import it,
    with ``.dev_scripts`` on the import path)."""
    if str(DEV_SCRIPTS) not in sys.path:
        sys.path.append(str(DEV_SCRIPTS))
    return importlib.import_module(name)

"""The package's architecture: subpackages import only downwards
(utils -> ops / datasets -> layers -> backbones / heads -> checkpoint / engine /
deploy -> analysis / apis), so there is no import cycle between them; the
scripts under tools/ are command-line wrappers of the package; a backbone's
training forward enters few project files."""
import ast
from pathlib import Path

import pytest

from ..backbone_cases import CASES, REGISTERED, build_micro

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'vattn_mm'
#: a subpackage may import only subpackages of a lower rank (and itself)
RANKS = {'utils': 0, 'ops': 1, 'datasets': 1, 'layers': 2, 'backbones': 3, 'heads': 3,
         'checkpoint': 4, 'engine': 4, 'deploy': 4, 'analysis': 5, 'apis': 5}
#: the longest a tool (argument parsing and calls into the package) and a module may be
TOOL_MAX_LINES, MODULE_MAX_LINES = 200, 500


def subpackage(module: str) -> str:
    """``'vattn_mm.layers.hilo'`` -> ``'layers'`` (``''`` for the package root)."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 and parts[1] in RANKS else ''


def imported_modules(path: Path) -> set[str]:
    """Every vattn_mm module ``path`` imports, at module level or inside a
    function (a lazy import is still a dependency)."""
    package = '.'.join(path.parent.relative_to(PACKAGE.parent).parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith('vattn_mm')}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')
                base = base[:len(base) - node.level + 1]
                target = '.'.join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ''
            if target.startswith('vattn_mm'):
                found.add(target)
    return found


def dependency_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in RANKS}
    for path in PACKAGE.rglob('*.py'):
        source = subpackage('.'.join(path.relative_to(PACKAGE.parent).with_suffix('').parts))
        if not source:
            continue
        for target in imported_modules(path):
            dest = subpackage(target)
            if dest and dest != source:
                graph[source].add(dest)
    return graph


def test_subpackages_import_only_downwards():
    wrong = sorted(f'{src} imports {dst}' for src, dsts in dependency_graph().items()
                   for dst in dsts if RANKS[dst] >= RANKS[src])
    assert not wrong, wrong


def test_the_walk_sees_relative_and_lazy_imports():
    graph = dependency_graph()
    assert 'layers' in graph['backbones'] and 'backbones' in graph['checkpoint']
    deps = imported_modules(PACKAGE / 'backbones' / 'base.py')
    assert {'vattn_mm.layers', 'vattn_mm.backbones.loading'} <= deps, deps


def test_no_cycle_between_subpackages():
    graph = dependency_graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list) -> None:
        state[node] = 1
        for nxt in graph[node]:
            assert state.get(nxt) != 1, f'import cycle: {" -> ".join(path + [node, nxt])}'
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [])


def module_graph() -> dict[str, set[str]]:
    """``module -> modules it imports`` over the package's files (a name
    imported from a package is its submodule where one of that name exists,
    else the package's ``__init__``)."""
    files = {'.'.join(p.relative_to(PACKAGE.parent).with_suffix('').parts).removesuffix('.__init__'): p
             for p in PACKAGE.rglob('*.py') if '.mim' not in p.parts}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == '__init__.py' else module.rpartition('.')[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = package.split('.')[:len(package.split('.')) - node.level + 1] \
                    if node.level else []
                target = '.'.join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f'{target}.{alias.name}'
                    found.add(sub if sub in files else target)
        graph[module] = {m for m in found if m in files and m != module}
    return graph


def test_no_import_cycle_between_modules():
    """No two modules import each other, directly or round a longer loop
    (a package's ``__init__`` importing its own submodules excepted: that is
    how a package gathers its names)."""
    graph = module_graph()
    assert {'vattn_mm.ops.registry'} <= graph['vattn_mm.ops.autograd']  # the walk sees imports
    state: dict[str, int] = {}

    def visit(node: str, path: list) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + '.'):          # a package's __init__ gathering its submodules
                continue
            assert state.get(nxt) != 1, f'import cycle: {" -> ".join(path + [node, nxt])}'
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_tools_are_thin_wrappers():
    """Library code lives in the package: every script under tools/ stays a
    short command line around it, and no module of the package grows past
    what one reads in a sitting."""
    def too_long(folder: Path, limit: int) -> list[str]:
        paths = [p for p in folder.rglob('*.py') if '.mim' not in p.parts]  # an install's links
        lengths = {path.relative_to(ROOT): len(path.read_text().splitlines()) for path in paths}
        return sorted(f'{path}: {n} lines' for path, n in lengths.items() if n > limit)
    assert too_long(ROOT / 'tools', TOOL_MAX_LINES) == []
    assert too_long(PACKAGE, MODULE_MAX_LINES) == []


#: most project files one training forward of a backbone may enter: the
#: backbone, the block and its FFNs, the mixer(s), the tokenisers, the
#: attention helpers and at most the two generic ops modules and one kernel
FORWARD_FILE_BUDGET = 8


def _files_entered(model, x) -> dict[str, set[str]]:
    """Project files (relative to the package) a call of ``model(x)`` enters,
    with the functions entered in each."""
    import sys

    import vattn_mm
    root = Path(vattn_mm.__file__).parent
    seen: dict[str, set[str]] = {}

    def profile(frame, event, arg):
        if event == 'call':
            path = Path(frame.f_code.co_filename)
            if root in path.parents:
                seen.setdefault(str(path.relative_to(root)), set()).add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        model(x)
    finally:
        sys.setprofile(None)
    return seen


# TokenPyramid's micro runs a different mixer in each stage (each adds its files);
# with one mixer it is PVTv2, P2T or QuadTree, counted here
@pytest.mark.parametrize('name', [n for n in REGISTERED if n != 'TokenPyramid'])
def test_a_training_forward_stays_in_few_files(name):
    import torch
    model = build_micro(name).train()
    x = torch.randn(1, 3, *CASES[name].micro_size)
    files = _files_entered(model, x)
    assert len(files) <= FORWARD_FILE_BUDGET, (
        f'{name}: one training forward enters {len(files)} project files '
        f'(at most {FORWARD_FILE_BUDGET}): ' + ', '.join(sorted(files)))
    for path, functions in files.items():
        if path.startswith('utils/'):
            raise AssertionError(f'{name}: the forward calls utils ({path}: {sorted(functions)}); '
                                 'run-time conditions belong in vattn_mm/ops/autograd.py')

"""The package apart from the source tree: built as a wheel and installed
into a bare folder, it serves the checkout's benchmark, FLOPs and export tools
run from another folder; and the package itself leaves processes and import
paths to the tools."""
import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from vattn_mm.analysis import spec_complexity
from vattn_mm.checkpoint.export import build_classifier

from ..golden import case_paths, load_fixture, official_arch, write_released

#: slow (builds and installs a wheel, runs the tools from it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'vattn_mm'
#: what only the tools may do: start or re-execute interpreters, read
#: ``/proc``, change the import path
TOOLS_ONLY = ('sys.path', 'PYTHONPATH', '/proc/', 'subprocess', 'os.exec', 'sys.executable')
#: the one package module that reads ``/proc`` (the CPU peak-memory meter,
#: called in the worker processes the benchmark tools start), and what it reads
PROC_READER, PROC_FILES = PACKAGE / 'analysis' / 'bench' / 'memory.py', (
    '/proc/self/status', '/proc/self/clear_refs')
#: every process of the tools records which vattn_mm it imported
IMPORT_LOG_HOOK = '''\
import atexit, json, os, sys


def _record():
    module = sys.modules.get('vattn_mm')
    with open(os.environ['VATTN_TEST_IMPORT_LOG'], 'a') as f:
        f.write(json.dumps(dict(argv=sys.argv, vattn_mm=getattr(module, '__file__', None)))
                + '\\n')


atexit.register(_record)
'''


def _lines_with(paths, words) -> list[str]:
    return [f'{path.relative_to(ROOT)}:{number}: {line.strip()}' for path in sorted(paths)
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if any(word in line for word in words)]


def test_package_leaves_processes_and_import_paths_to_the_tools():
    others = set(PACKAGE.rglob('*.py')) - {PROC_READER}
    hits = _lines_with(others, TOOLS_ONLY) + _lines_with(
        [PROC_READER], [w for w in TOOLS_ONLY if w != '/proc/']) + [
        line for line in _lines_with([PROC_READER], ('/proc/', ))
        if not any(name in line for name in PROC_FILES)]
    assert not hits, 'move these to tools/:\n' + '\n'.join(hits)


def test_tools_import_the_installed_package():
    """No tool or maintainer script puts the checkout on the import path: they run against
    whatever vattn_mm the interpreter has installed (editable or not)."""
    tools = [p for folder in ('tools', '.dev_scripts') for p in (ROOT / folder).rglob('*')
             if p.suffix in ('.py', '.sh')]
    hits = _lines_with(tools, ('sys.path', 'PYTHONPATH'))
    # the GPU node command installs the kit and vattn-mm into a folder of its own (the node's
    # python is a venv it cannot write to) and must put that folder on the path
    node = [h for h in hits if h.startswith('.dev_scripts/gpu_kit/run.sh:') and '$ROOT' not in h
            and re.search(r'PYTHONPATH=(\$ENV/\w+:?)+( \\)?$', h)]
    assert set(hits) == set(node), '\n'.join(sorted(set(hits) - set(node)))
    assert node


def _can_build_wheels() -> bool:
    """pip and setuptools with a ``bdist_wheel`` command (setuptools' own or
    the ``wheel`` package's), found without importing them."""
    return all(importlib.util.find_spec(name) for name in ('pip', 'setuptools')) and bool(
        entry_points(group='distutils.commands', name='bdist_wheel'))


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                         timeout=300, **kwargs)
    assert res.returncode == 0, f'{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}'
    return res


@pytest.fixture(scope='module')
def installed(tmp_path_factory) -> Path:
    """A folder with ``site/`` (vattn_mm installed from a wheel), ``hook/``
    (the import log) and an empty working folder ``run/``."""
    if not _can_build_wheels():
        pytest.skip('pip, setuptools or wheel is not available')
    tmp = tmp_path_factory.mktemp('install')
    # the build reads a copy: stale build/ folders of the checkout cannot leak in
    src = tmp / 'src'
    shutil.copytree(PACKAGE, src / PACKAGE.name, ignore=shutil.ignore_patterns('__pycache__'))
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, src / path.name)
    pip = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '--no-input', '-q']
    _run(pip + ['wheel', '--no-deps', '--no-build-isolation', '--no-index', '-w', tmp / 'dist',
                src], cwd=tmp)
    wheel, = (tmp / 'dist').glob('vattn_mm-*.whl')
    _run(pip + ['install', '--no-deps', '--no-index', '--target', tmp / 'site', wheel], cwd=tmp)
    (tmp / 'hook').mkdir()
    (tmp / 'hook' / 'sitecustomize.py').write_text(IMPORT_LOG_HOOK)
    (tmp / 'run').mkdir()
    return tmp


def _tool(installed: Path, script: str, *args) -> str:
    """Run a tool of the checkout from ``run/`` with only the installed
    package (and the import-log hook) on the path; its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed / 'hook'),
                                                       str(installed / 'site')]),
               VATTN_TEST_IMPORT_LOG=str(installed / 'imports.jsonl'), OMP_NUM_THREADS='1')
    return _run([sys.executable, ROOT / 'tools' / script, *args], cwd=installed / 'run',
                env=env).stdout


def test_tools_run_on_the_installed_package(installed):
    """A one-iteration forward benchmark, a FLOP count and an export, each
    process importing vattn_mm from the installed wheel."""
    out = _tool(installed, 'analysis/benchmark.py', 'PVTv2:b0', '--shapes', '64x64', '--modes',
                'fwd', '--warmup', '0', '--iters', '1', '--threads', '1', '--no-progress',
                '--out-dir', 'bench', '--name', 'smoke')
    with open(installed / 'run' / 'bench' / 'smoke.csv') as f:
        row, = csv.DictReader(f)
    assert (row['target'], row['shape'], row['error']) == ('PVTv2:b0', '64x64', '')
    assert float(row['fwd_ms']) > 0 and float(row['fwd_peak_mib']) >= 0
    assert '| PVTv2:b0 | 64x64 |' in out

    cx = spec_complexity('PVTv2:b0', (64, 64))
    out = _tool(installed, 'analysis/get_flops.py', 'PVTv2:b0', '--shape', '64')
    assert f'Params: {cx.params / 1e6:.2f} M' in out
    assert f'FLOPs (multiply-adds): {cx.macs / 1e9:.3f} G' in out

    rec = load_fixture(case_paths('pvtv2')[0])
    src = write_released(rec, installed)
    arch = official_arch(rec, drop=('out_indices', ))
    _tool(installed, 'export_to_mmpretrain.py', src, '--family', 'pvtv2', '--arch', repr(arch),
          '--out-dir', 'exported', '--name', 'cls')
    cfg = Config.fromfile(installed / 'run' / 'exported' / 'cls.py')
    model = build_classifier(cfg.model.to_dict(), 'cpu')
    weights = torch.load(installed / 'run' / 'exported' / 'cls.pth', weights_only=True)
    model.load_state_dict(weights['state_dict'])              # strict: the same model

    records = [json.loads(line) for line in (installed / 'imports.jsonl').read_text().splitlines()]
    scripts = sorted(Path(r['argv'][0]).name for r in records)
    # the benchmark's time and memory workers run bench_workers.py
    assert scripts == ['bench_workers.py', 'bench_workers.py', 'benchmark.py',
                       'export_to_mmpretrain.py',
                       'get_flops.py'], records
    site = (installed / 'site').resolve()
    for record in records:
        assert Path(record['vattn_mm']).resolve().is_relative_to(site), record


#: the subpackages the wheel ships: the library, nothing of the studies (projects/) or the
#: maintainer checks (.dev_scripts/)
WHEEL_PACKAGES = {'vattn_mm', 'vattn_mm.analysis', 'vattn_mm.analysis.bench', 'vattn_mm.apis',
                  'vattn_mm.backbones', 'vattn_mm.checkpoint', 'vattn_mm.datasets',
                  'vattn_mm.deploy', 'vattn_mm.engine', 'vattn_mm.heads', 'vattn_mm.layers',
                  'vattn_mm.ops', 'vattn_mm.utils'}
#: what a module reading the checkout would name: the folders only a checkout has (the
#: configs ship in the wheel under vattn_mm/.mim; docs/ pages are named as evidence)
CHECKOUT_FOLDERS = {'tests', 'projects', '.dev_scripts'}


def test_the_wheel_holds_the_library_only(installed):
    """The wheel's modules are the package's source files, in the library's
    subpackages only, and none of them names a folder of the checkout."""
    import ast
    import zipfile
    wheel, = (installed / 'dist').glob('vattn_mm-*.whl')
    assert wheel.name.endswith('-py3-none-any.whl'), wheel.name   # installing compiles nothing
    with zipfile.ZipFile(wheel) as archive:
        sources = {name: archive.read(name).decode() for name in archive.namelist()
                   if name.endswith('.py') and '/.mim/' not in name}
    modules = {name[:-len('.py')].replace('/', '.').removesuffix('.__init__') for name in sources}
    packages = {m for m in modules if f"{m.replace('.', '/')}/__init__.py" in sources}
    assert packages == WHEEL_PACKAGES, sorted(packages ^ WHEEL_PACKAGES)
    checkout = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob('*.py') if '.mim' not in p.parts}
    assert set(sources) == checkout, sorted(set(sources) ^ checkout)
    for name, text in sources.items():
        tree = ast.parse(text)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        named = {node.value.strip('/').split('/')[0] for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)
                 and id(node) not in docstrings}
        assert not named & CHECKOUT_FOLDERS, (name, named & CHECKOUT_FOLDERS)

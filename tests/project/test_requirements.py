"""vattn-mm declares version ranges (setup.py, requirements.txt); the tested
versions are the pins of tools/constraints.txt (the pinned stack, which
tools/install.sh passes to every pip install) and of
tools/constraints-{floor,newest}.txt (CI's compatibility jobs). Every pin
satisfies the ranges, the ranges refuse releases the code cannot run with,
and ``pip install -e .`` with the extras this environment has changes no
package but vattn-mm (pip's resolver, offline): in the pinned environment,
and in the compatibility jobs' (mmcv-lite)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / 'tools' / 'constraints.txt'
#: the stacks CI tests: pinned (the full suite) and the compatibility jobs' floor and newest
STACKS = [CONSTRAINTS, ROOT / 'tools' / 'constraints-floor.txt',
          ROOT / 'tools' / 'constraints-newest.txt']
EXTRAS = ('openmmlab', 'det', 'seg', 'cls', 'all', 'deploy', 'timm', 'tests')
#: extra -> the distribution whose presence here means the extra is installed
EXTRA_PROBES = {'openmmlab': 'mmengine', 'det': 'mmdet', 'seg': 'mmsegmentation', 'cls': 'mmpretrain', 'deploy': 'onnx'}

#: releases the ranges must refuse, and why
REFUSED = [
    ('torch', '2.0.1', 'the floor is 2.1 (utils/compat.py)'),
    ('mmengine', '1.0.0', 'mmdet, mmseg and mmpretrain refuse mmengine >= 1.0'),
    ('mmengine', '0.9.1', 'the series the code is written for is 0.10'),
    ('mmdet', '2.28.2', 'OpenMMLab 1.x'),
    ('mmsegmentation', '0.30.0', 'OpenMMLab 1.x'),
    ('mmpretrain', '1.1.1', 'the release the configs are written for is 1.2'),
    ('onnxruntime', '1.11.1', 'no opset 17 (the default of the export)'),
]


def read_pins(path: Path) -> dict:
    """``{canonical name: Version}`` of a constraints file of ``name==version``
    lines (``#`` starts a comment); any other line is an error naming it."""
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split('#', 1)[0].strip()
        if not text:
            continue
        req = Requirement(text)
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != '==' or req.marker or req.extras:
            raise ValueError(f'{path.name}:{number}: {line!r} is not an exact pin name==version')
        name = canonicalize_name(req.name)
        if name in pins:
            raise ValueError(f'{path.name}:{number}: {req.name} is pinned twice')
        pins[name] = Version(specs[0].version)
    return pins


@pytest.fixture(scope='module', params=STACKS, ids=lambda p: p.name)
def pins(request) -> dict:
    return read_pins(request.param)


def installed_extras() -> list:
    """The extras whose packages this environment has."""
    return [extra for extra, dist in EXTRA_PROBES.items() if _installed(dist)]


def _installed(dist: str) -> bool:
    try:
        dist_version(dist)
    except PackageNotFoundError:
        return False
    return True


@pytest.fixture(scope='module')
def resolution(tmp_path_factory) -> dict:
    """pip's report of ``pip install -e .[<the extras installed here>]`` into
    this environment, offline (``--no-index``: only what is installed can
    satisfy it) and without the machine's pip configuration."""
    report = tmp_path_factory.mktemp('pip') / 'report.json'
    extras = ','.join(installed_extras())
    cmd = [sys.executable, '-m', 'pip', '--isolated', '--disable-pip-version-check', '--no-input',
           'install', '--dry-run', '--no-index', '--no-build-isolation', '--quiet',
           '--report', str(report), '-e', f'{ROOT}[{extras}]' if extras else str(ROOT)]
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)   # --isolated still reads /etc/xdg/pip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, (f'this environment does not satisfy vattn-mm:\n'
                                 f'{res.stdout}\n{res.stderr}')
    return json.loads(report.read_text())


@pytest.fixture(scope='module')
def declared(resolution) -> list:
    """vattn-mm's requirements as pip read them from setup.py (with extras)."""
    item, = [i for i in resolution['install'] if i['metadata']['name'] == 'vattn-mm']
    return [Requirement(r) for r in item['metadata']['requires_dist']]


def _applies(req: Requirement, extra: str = '') -> bool:
    return req.marker is None or req.marker.evaluate({'extra': extra})


def test_installing_into_this_environment_changes_nothing_else(resolution):
    changed = sorted(f"{i['metadata']['name']} {i['metadata']['version']}"
                     for i in resolution['install'] if i['metadata']['name'] != 'vattn-mm')
    assert not changed, f'pip install -e . would install or replace: {changed}'


def test_every_requirement_is_a_range_and_every_pin_satisfies_it(declared, pins):
    problems = []
    for req in declared:
        if not any(_applies(req, extra) for extra in ('', *EXTRAS)):
            continue
        if any(spec.operator in ('==', '===') for spec in req.specifier):
            problems.append(f'{req}: an exact pin belongs in {CONSTRAINTS.name}, not in the package')
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            continue   # a package of an extra this stack leaves out
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f'{req.name}=={pin} (pinned) is outside {req}')
    assert not problems, '\n'.join(problems)


def test_a_timm_users_install_asks_for_torch_and_timm_only(declared):
    """``pip install 'vattn-mm[timm]'`` into an environment with torch and
    timm installs vattn-mm alone (measured: docs/timm.md)."""
    needed = {canonicalize_name(r.name) for r in declared if _applies(r) or _applies(r, 'timm')}
    assert needed == {'torch', 'timm'}, sorted(needed)


def test_ranges_refuse_releases_the_code_cannot_run_with(declared):
    ranges = {canonicalize_name(r.name): r.specifier for r in declared
              if any(_applies(r, extra) for extra in ('', *EXTRAS))}
    accepted = [f'{name} {version}: {why}' for name, version, why in REFUSED
                if ranges[canonicalize_name(name)].contains(version, prereleases=True)]
    assert not accepted, 'accepted although\n' + '\n'.join(accepted)



def test_the_pinned_stack_pins_every_requirement(declared):
    pinned = read_pins(CONSTRAINTS)
    unpinned = sorted({r.name for r in declared if canonicalize_name(r.name) not in pinned})
    assert not unpinned, f'no pin in {CONSTRAINTS.name}: {unpinned}'


@pytest.mark.parametrize('stack', STACKS, ids=lambda p: p.name)
def test_every_stack_is_within_what_the_import_checks(stack):
    """torch, mmengine and mmcv (or mmcv-lite) of every tested stack pass the
    version checks of ``import vattn_mm`` (vattn_mm/utils/requires.py)."""
    from vattn_mm.utils.compat import MIN_TORCH
    from vattn_mm.utils.requires import MMCV_RANGE, MMENGINE_RANGE
    pins = read_pins(stack)
    release = lambda v: (v.major, v.minor)   # noqa: E731
    mmcv = pins.get('mmcv') or pins['mmcv-lite']
    assert release(pins['torch']) >= MIN_TORCH
    assert MMENGINE_RANGE[0] <= release(pins['mmengine']) < MMENGINE_RANGE[1]
    assert MMCV_RANGE[0] <= release(mmcv) < MMCV_RANGE[1]

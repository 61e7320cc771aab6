"""vattn-mm declares version ranges (setup.py, requirements.txt); the tested
versions are the pins of tools/constraints.txt, which tools/install.sh passes
to every pip install. The pins satisfy the ranges, the ranges refuse releases
the code cannot run with, and ``pip install -e .`` into the pinned environment
changes no package but vattn-mm (pip's resolver, offline)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / 'tools' / 'constraints.txt'
EXTRAS = ('deploy', 'tests')

#: releases the ranges must refuse, and why
REFUSED = [
    ('torch', '2.7.1', 'no torch._C._autograd._top_saved_tensors_default_hooks (ops/recompute.py)'),
    ('torch', '2.4.1', 'no torch.serialization.safe_globals (utils/safe_load.py)'),
    ('torchvision', '0.22.1', 'the torchvision of torch 2.7'),
    ('mmcv', '2.2.0', 'mmdet 3.3 and mmseg 1.2 refuse mmcv >= 2.2'),
    ('mmcv', '1.7.2', 'OpenMMLab 1.x'),
    ('mmengine', '1.0.0', 'mmdet, mmseg and mmpretrain refuse mmengine >= 1.0'),
    ('mmdet', '2.28.2', 'OpenMMLab 1.x'),
    ('mmsegmentation', '0.30.0', 'OpenMMLab 1.x'),
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


@pytest.fixture(scope='module')
def pins() -> dict:
    return read_pins(CONSTRAINTS)


@pytest.fixture(scope='module')
def resolution(tmp_path_factory) -> dict:
    """pip's report of ``pip install -e .[deploy]`` into this environment,
    offline (``--no-index``: only what is installed can satisfy it) and
    without the machine's pip configuration."""
    report = tmp_path_factory.mktemp('pip') / 'report.json'
    cmd = [sys.executable, '-m', 'pip', '--isolated', '--disable-pip-version-check', '--no-input',
           'install', '--dry-run', '--no-index', '--no-build-isolation', '--quiet',
           '--report', str(report), '-e', f'{ROOT}[deploy]']
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, (f'the pinned environment does not satisfy vattn-mm:\n'
                                 f'{res.stdout}\n{res.stderr}')
    return json.loads(report.read_text())


@pytest.fixture(scope='module')
def declared(resolution) -> list:
    """vattn-mm's requirements as pip read them from setup.py (with extras)."""
    item, = [i for i in resolution['install'] if i['metadata']['name'] == 'vattn-mm']
    return [Requirement(r) for r in item['metadata']['requires_dist']]


def _applies(req: Requirement, extra: str = '') -> bool:
    return req.marker is None or req.marker.evaluate({'extra': extra})


def test_installing_into_the_pinned_environment_changes_nothing_else(resolution):
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
            problems.append(f'{req.name} has no pin in {CONSTRAINTS.name}')
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f'{req.name}=={pin} (pinned) is outside {req}')
    assert not problems, '\n'.join(problems)


def test_ranges_refuse_releases_the_code_cannot_run_with(declared):
    ranges = {canonicalize_name(r.name): r.specifier for r in declared
              if any(_applies(r, extra) for extra in ('', *EXTRAS))}
    accepted = [f'{name} {version}: {why}' for name, version, why in REFUSED
                if ranges[canonicalize_name(name)].contains(version, prereleases=True)]
    assert not accepted, 'accepted although\n' + '\n'.join(accepted)


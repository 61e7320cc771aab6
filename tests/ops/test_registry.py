"""The fast-path registry: settings, the environment variable, configure()."""
import pickle

import pytest
import torch
from torch import nn

from vattn_mm import ops
from vattn_mm.ops import registry


@pytest.fixture
def sample_path(monkeypatch):
    """A throwaway registered path (removed afterwards)."""
    monkeypatch.setitem(registry.FAST_PATHS, 'sample_path', registry.FastPath(
        'sample_path', 'a test path', devices=('cpu', 'cuda'), default_devices=('cpu',)))
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    return 'sample_path'


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.path = ops.switch('sample_path')
        self.child = nn.Sequential(nn.Identity())
        self.child.path = ops.switch('sample_path')


def test_defaults_and_settings(sample_path):
    x = torch.zeros(1)
    assert ops.switch(sample_path).on(x)
    assert ops.switch(sample_path).devices == {'cpu'}
    assert not ops.switch(sample_path, 'plain').on(x)
    assert not ops.switch(sample_path, {sample_path: False})
    assert ops.switch(sample_path, {sample_path: True}).devices == {'cpu', 'cuda'}
    assert ops.switch(sample_path, {sample_path: ['cuda']}).devices == {'cuda'}
    assert not ops.switch(sample_path).on(x.to(torch.int64))


def test_environment_variable_and_precedence(sample_path, monkeypatch):
    monkeypatch.setenv(ops.ENV_VAR, 'plain')
    assert not ops.switch(sample_path)
    monkeypatch.setenv(ops.ENV_VAR, f'{sample_path}=on')
    assert ops.switch(sample_path).devices == {'cpu', 'cuda'}
    # the config's setting is more specific than the environment
    assert ops.switch(sample_path, {sample_path: 'default'}).devices == {'cpu'}
    monkeypatch.setenv(ops.ENV_VAR, f'{sample_path}=maybe')
    with pytest.raises(ValueError, match='VATTN_FAST_PATHS'):
        ops.switch(sample_path)


@pytest.mark.parametrize('setting, match', [
    ({'no_such_path': False}, 'unknown path'), ('fast', "'plain'"),
    ({'sample_path': 'sometimes'}, 'expected True'), ({'sample_path': ['tpu']}, 'does not run on')])
def test_bad_settings_are_named(sample_path, setting, match):
    with pytest.raises(ValueError, match=match):
        ops.check_setting(setting)


def test_configure_reaches_every_module_and_survives_copies(sample_path):
    model = ops.configure(Holder(), 'plain')
    assert not model.path and not model.child.path
    assert pickle.loads(pickle.dumps(model)).child.path.devices == frozenset()
    ops.configure(model, {sample_path: True})
    assert model.child.path.devices == {'cpu', 'cuda'}
    rows = {r['name']: r for r in ops.describe(model)}
    assert rows[sample_path]['on_in_model'] == ['cpu', 'cuda']


def test_registration_is_checked(sample_path):
    with pytest.raises(ValueError, match='default devices'):
        registry.FastPath('x', 'r', devices=('cpu',), default_devices=('cuda',))
    with pytest.raises(ValueError, match=r"modes must be among \('train', 'inference'\)"):
        registry.FastPath('x', 'r', modes=('training',))
    with pytest.raises(ValueError, match='modes must be among'):
        registry.FastPath('x', 'r', modes=())
    with pytest.raises(KeyError, match='already registered'):
        ops.register_fast_path(sample_path, 'again')


def test_a_path_this_torch_lacks_is_off_and_says_why(monkeypatch):
    """``needs=(False, what)``: off whatever the setting, and describe() says why."""
    monkeypatch.delitem(registry.FAST_PATHS, 'lacking_path', raising=False)
    path = registry.register_fast_path('lacking_path', 'a test path',
                                       needs=(False, 'torch >= 99 (an API)'))
    try:
        assert 'torch >= 99 (an API)' in path.unavailable
        assert torch.__version__ in path.unavailable
        for setting in (None, {'lacking_path': True}, {'lacking_path': ('cpu',)}):
            assert not ops.switch('lacking_path', setting)
        monkeypatch.setenv(ops.ENV_VAR, 'lacking_path=on')
        assert not ops.switch('lacking_path')
        row = next(r for r in ops.describe(nn.Linear(1, 1)) if r['name'] == 'lacking_path')
        assert row['unavailable'] == path.unavailable and row['on_in_model'] == []
    finally:
        del registry.FAST_PATHS['lacking_path']


def test_the_pinned_torch_has_every_path():
    """On the tested stack (tools/constraints.txt) no path is off for lack of
    an API: a skip of a path's tests there would hide a regression."""
    from pathlib import Path
    pins = (Path(__file__).resolve().parents[2] / 'tools' / 'constraints.txt').read_text()
    if f'torch=={torch.__version__.split("+")[0]}' not in pins.split():
        pytest.skip(f'torch {torch.__version__} is not the pinned one')
    assert {name: p.unavailable for name, p in ops.FAST_PATHS.items() if p.unavailable} == {}


def test_an_unproven_torch_leaves_every_path_off_unless_named(monkeypatch):
    """On a torch series outside PROVEN_TORCH a path is off by default,
    describe() says why, and a setting naming it still turns it on."""
    reason = registry.unproven_reason('2.5.1+cpu')
    assert '2.5' in reason and all(series in reason for series in registry.PROVEN_TORCH)
    assert registry.unproven_reason(f'{registry.PROVEN_TORCH[0]}.7+cu118') is None
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    monkeypatch.setitem(registry.FAST_PATHS, 'unproven_path', registry.FastPath(
        'unproven_path', 'a test path', unproven=reason))
    assert not ops.switch('unproven_path')
    assert not ops.switch('unproven_path', {'unproven_path': 'default'})
    assert ops.switch('unproven_path', {'unproven_path': True}).devices == {'cpu', 'cuda'}
    monkeypatch.setenv(ops.ENV_VAR, 'unproven_path=on')
    assert ops.switch('unproven_path').devices == {'cpu', 'cuda'}
    row = next(r for r in ops.describe() if r['name'] == 'unproven_path')
    assert row['unproven'] == reason


def test_every_ci_torch_is_proven():
    """The torch of each CI job (floor, pinned, newest) is in PROVEN_TORCH,
    and every series there is one a job runs: the property tests
    (tests/ops/test_fast_path_properties.py) run wherever a path is on by
    default."""
    from pathlib import Path
    tools = Path(__file__).resolve().parents[2] / 'tools'
    series = set()
    for name in ('constraints.txt', 'constraints-floor.txt', 'constraints-newest.txt'):
        pin = next(line for line in (tools / name).read_text().split() if line.startswith('torch=='))
        series.add(registry.torch_series(pin.split('==')[1]))
    assert series == set(registry.PROVEN_TORCH)

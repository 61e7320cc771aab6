"""The norm / activation builders and DropPath build, with torch alone, the
modules mmcv builds for the same configs (mmcv, with or without ops, is in
every tested stack, so each is compared with it)."""
import sys

import pytest
import torch
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmcv.cnn.bricks import DropPath as MmcvDropPath

from vattn_mm.layers.bricks import ACTIVATIONS, NORMS, DropPath, build_activation, build_norm

NORM_CONFIGS = [dict(type=name, **({'num_groups': 4} if name == 'GN' else {})) for name in NORMS]
NORM_CONFIGS += [dict(type='LN', eps=1e-6), dict(type='BN', requires_grad=False, momentum=0.03)]


@pytest.mark.parametrize('cfg', NORM_CONFIGS, ids=str)
def test_norms_are_mmcvs(cfg):
    torch.manual_seed(0)
    theirs = build_norm_layer(cfg, 16)[1]
    ours = build_norm(cfg, 16)
    # mmcv's SyncBN is mmengine's subclass of torch's, which changes nothing on torch
    assert type(ours) in type(theirs).__mro__[:1 + (cfg['type'] == 'SyncBN')]
    assert repr(ours) == repr(theirs)
    assert [(n, p.requires_grad) for n, p in ours.named_parameters()] == \
        [(n, p.requires_grad) for n, p in theirs.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(),
                                                  theirs.state_dict().values()))


@pytest.mark.parametrize('cfg', [dict(type=name) for name in ACTIVATIONS]
                         + [dict(type='ReLU', inplace=True), dict(type='LeakyReLU', negative_slope=0.2)],
                         ids=str)
def test_activations_are_mmcvs(cfg):
    torch.manual_seed(0)
    theirs, ours = build_activation_layer(dict(cfg)), build_activation(cfg)
    assert type(ours) is type(theirs) and repr(ours) == repr(theirs)


def test_other_types_are_built_by_mmcv_or_named(monkeypatch):
    assert type(build_activation(dict(type='Swish'))).__module__.startswith('mmcv')
    monkeypatch.setitem(sys.modules, 'mmcv', None)
    with pytest.raises(KeyError, match=r"activation type 'Swish' is not one of .*'GELU'.*"
                                       r"built by mmcv, which is not installed"):
        build_activation(dict(type='Swish'))
    with pytest.raises(ValueError, match='GN needs num_groups'):
        build_norm(dict(type='GN'), 8)


@pytest.mark.parametrize('shape', [(4, 10, 8), (3, 8, 5, 5)])
def test_drop_path_draws_as_mmcv_does(shape):
    x = torch.randn(*shape, requires_grad=True)
    ours, theirs = DropPath(0.3), MmcvDropPath(0.3)
    torch.manual_seed(1)
    a = ours(x)
    torch.manual_seed(1)
    b = theirs(x)
    assert torch.equal(a, b) and (a == 0).any()
    assert ours.eval()(x) is x and DropPath(0.)(x) is x

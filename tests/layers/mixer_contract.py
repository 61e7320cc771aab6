"""Checks of the token-mixer contract: what the suite runs for every
registered mixer (``tests/layers/test_mixers.py`` and ``tests/layers/test_mixer_scaling.py``
parametrize them over ``MIXERS``), each reading only the mixer's name and its
declarations (:mod:`vattn_mm.layers.builder`)."""
from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vattn_mm.analysis import build_spec, count_complexity, spec_complexity
from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import MIXERS, SCALINGS, build_mixer

MICRO = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1])
#: input sides of the scaling checks: stage maps of 128x128 and 256x256 tokens
SIDES = (512, 1024)


def micro(mixer, **kwargs) -> TokenPyramid:
    model = TokenPyramid(MICRO, mixer=mixer, drop_path_rate=0., **kwargs)
    model.init_weights()
    return model


# ------------------------------------------------------------ declarations
def check_declarations(name: str) -> None:
    """``scaling`` is declared and the MAC formulas are methods of the module."""
    cls = MIXERS[name]
    assert getattr(cls, 'scaling', None) in SCALINGS, f'{name}: declare scaling in {SCALINGS}'
    for hook in ('macs', 'elementwise_macs'):
        assert not hasattr(cls, hook) or callable(getattr(cls, hook)), (name, hook)


# --------------------------------------------------- forward and backward
def check_from_type_alone(name: str, size: tuple[int, int]) -> None:
    """Built from its type alone in every stage: forward and backward at
    ``size``, finite gradients for every parameter."""
    model = micro(dict(type=name)).train()
    x = torch.randn(2, 3, *size, requires_grad=True)
    outs = model(x)
    assert [o.shape for o in outs] == [
        (2, c, math.ceil(size[0] / s), math.ceil(size[1] / s))
        for c, s in zip(MICRO['embed_dims'], (4, 8, 16, 32))]
    sum(o.square().mean() for o in outs).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for key, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), key
    mixers = [stage.blocks[0].attn for stage in model.stages]
    assert all(type(m) is MIXERS[name] for m in mixers)


def check_batch_independence(name: str) -> None:
    model = micro(dict(type=name)).eval()
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        both = model(x)
        first = model(x[:1])
    for a, b in zip(both, first):
        torch.testing.assert_close(a[:1], b, rtol=1e-4, atol=1e-5)


def check_bf16_and_cp(name: str) -> None:
    """Forward and backward under CPU bf16 autocast stay finite and near the
    float32 outputs; activation checkpointing gives the same gradients."""
    model = micro(dict(type=name)).train()
    x = torch.randn(1, 3, 64, 64)
    ref = model(x)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    sum(o.float().square().mean() for o in outs).backward()
    for out, want in zip(outs, ref):
        assert torch.isfinite(out).all()
        assert (out.float() - want).abs().max() <= 0.1 * want.abs().max() + 0.05
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

    grads = []
    for with_cp in (False, True):
        model.zero_grad()
        model.with_cp = with_cp
        inp = x.clone().requires_grad_()
        sum(o.square().mean() for o in model(inp)).backward()
        grads.append([inp.grad] + [p.grad.clone() for p in model.parameters()])
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, rtol=1e-5, atol=1e-6)


def check_inner_width(name: str) -> None:
    """A wider inner width (the declared ``inner_width`` option, what the
    attention zoo matches parameters with) keeps the token shapes, adds
    parameters, trains, and the explicit default width is the default
    module; a zero width is a clear error."""
    option = MIXERS[name].inner_width
    default = micro(dict(type=name))
    same = micro(dict(type=name, **{option: None}))
    assert {k: v.shape for k, v in default.state_dict().items()} == \
        {k: v.shape for k, v in same.state_dict().items()}
    wide = micro([dict(type=name, **{option: 2 * c}) for c in MICRO['embed_dims']]).train()
    assert sum(p.numel() for p in wide.parameters()) > sum(p.numel() for p in default.parameters())
    x = torch.randn(1, 3, 70, 90)
    outs = wide(x)
    assert [o.shape[1] for o in outs] == MICRO['embed_dims']
    sum(o.square().mean() for o in outs).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in wide.parameters())
    with pytest.raises(ValueError, match=option):
        build_mixer(dict(type=name, **{option: 0}), embed_dims=32, num_heads=2, stage=0)


# ----------------------------------------------------- cost and scaling
class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op returns while active."""

    def __init__(self):
        super().__init__()
        self.numel, self.where = 0, ''

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.where = t.numel(), f'{func} -> {tuple(t.shape)}'
        return out


def largest_in_mixer(name: str, side: int) -> LargestTensor:
    """The largest tensor the mixer of ``Mixer:name`` creates on a side x side
    image (shapes under FakeTensorMode: no memory, no arithmetic)."""
    record = LargestTensor()
    with FakeTensorMode():
        model = build_spec(f'Mixer:{name}')
        mixer = model.stages[0].blocks[0].attn
        mixer.register_forward_pre_hook(lambda *_: record.__enter__() and None)
        mixer.register_forward_hook(lambda *_: record.__exit__(None, None, None))
        with torch.no_grad():
            model(torch.randn(1, 3, side, side))
    return record


def check_linear_macs(name: str) -> None:
    """A ``'linear'`` mixer's multiply-adds grow 4x per 4x tokens."""
    small, large = (spec_complexity(f'Mixer:{name}', (s, s)).macs for s in SIDES)
    assert large / small == pytest.approx(4.0, rel=0.02)


def check_no_token_matrix(name: str) -> None:
    """No tensor with N x N entries (N tokens) unless the mixer declares
    ``full_attention``; a ``'linear'`` mixer's largest tensor grows like N."""
    if getattr(MIXERS[name], 'full_attention', False):
        return
    records = [largest_in_mixer(name, side) for side in SIDES]
    for side, record in zip(SIDES, records):
        tokens = (side // 4) ** 2
        assert record.numel < tokens * tokens / 8, f'{side}x{side}: {record.where}'
    if MIXERS[name].scaling == 'linear':   # (Swin pads 128 -> 133, 256 -> 259 a side: 3.79x)
        assert records[1].numel / records[0].numel == pytest.approx(4.0, rel=0.06), \
            [r.where for r in records]


def check_macs(name: str, side: int = 64) -> None:
    """The MACs booked on the mixer of ``Mixer:name``: positive, exactly the
    declared ``macs`` formula where there is one, more than the declared
    ``elementwise_macs`` (which are added to what the counter sees)."""
    shapes = []
    with FakeTensorMode():
        model = build_spec(f'Mixer:{name}').eval()
        mixer = model.stages[0].blocks[0].attn
        mixer.register_forward_pre_hook(lambda module, args: shapes.append(args[0].shape))
        x = torch.randn(1, 3, side, side)
        cx = count_complexity(model, lambda: model(x))
    booked = cx.by_module.get('TokenPyramid.stages.0.blocks.0.attn', 0)
    assert booked > 0, cx.table(depth=5)
    if hasattr(mixer, 'macs'):
        assert booked == mixer.macs(shapes[0])
    if hasattr(mixer, 'elementwise_macs'):
        assert booked > mixer.elementwise_macs(shapes[0]) > 0

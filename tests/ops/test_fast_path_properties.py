"""Property tests of every registered fast path (hypothesis): with the path
on, a backbone's outputs and gradients equal those of plain PyTorch, float64
gradients pass ``torch.autograd.gradcheck``, and a backward run twice gives
bitwise-identical gradients (memory read before it was written shows up as a
run-to-run difference).

The models are the released architectures of every family that holds the
path, at the micro widths and depths of the family's checks but with the
released variant's own kernels, windows, dilations, ratios, top-k and agent
counts (:func:`released_variant`). Hypothesis draws the variant, batch 1 or
3, odd and even heights and widths, the input's layout (contiguous,
channels-last, strided), the output gradients' layout (contiguous,
channels-last, strided, broadcast) and which other paths are off.

Budget: ``VATTN_PROPERTY_EXAMPLES`` examples per path and property test
(default :data:`EXAMPLES`), ``VATTN_GRADCHECK_EXAMPLES`` for gradcheck.
Failing examples are kept in hypothesis's database under
``$VATTN_CACHE/hypothesis/examples`` (outside the clone, so that later runs on the
machine replay them first), and the ones found so far are in
:data:`REGRESSIONS`, which run every time.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from vattn_mm import ops
from vattn_mm.backbones import backbone_class, registered_backbones

from .grads import assert_grads_match, move_off_init, result_names

#: default examples per path of the equality / repeatability test
EXAMPLES = 50
#: default examples per path of the float64 gradcheck
GRADCHECK_EXAMPLES = 10
_CACHE = Path(os.environ.get('VATTN_CACHE', Path.home() / '.cache' / 'vattn-mm'))
set_hypothesis_home_dir(str(_CACHE / 'hypothesis'))   # (not .hypothesis/ in the checkout)
SETTINGS = settings(
    max_examples=int(os.environ.get('VATTN_PROPERTY_EXAMPLES', EXAMPLES)), deadline=None,
    database=DirectoryBasedExampleDatabase(str(_CACHE / 'hypothesis' / 'examples')),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True)
GRADCHECK_SETTINGS = settings(
    SETTINGS, max_examples=int(os.environ.get('VATTN_GRADCHECK_EXAMPLES', GRADCHECK_EXAMPLES)))

#: the arch entries that set a model's size: taken from the family's micro
#: arch, every other entry (kernels, windows, dilations, ratios, ...) from the
#: released one
SIZE_KEYS = ('embed_dims', 'embed_dim', 'width_list', 'dim', 'depths', 'depth_list',
             'num_heads', 'mlp_ratios', 'mlp_ratio')

INPUT_LAYOUTS = ('contiguous', 'channels_last', 'strided')
GRAD_LAYOUTS = ('contiguous', 'channels_last', 'strided', 'broadcast')


def released_variant(family: str, arch: str) -> dict:
    """The released arch ``arch`` of ``family`` at the family's micro size."""
    cls = backbone_class(family)
    micro = cls.check_archs.micro
    return {**cls.arch_zoo[arch], **{k: v for k, v in micro.items() if k in SIZE_KEYS}}


def _released(family: str, arch: str) -> torch.nn.Module:
    return backbone_class(family)(released_variant(family, arch), drop_path_rate=0.)


def _build(family: str, arch: str, dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    model = _released(family, arch)
    model.init_weights()
    return move_off_init(model).to(dtype).train()


def _holders() -> dict[str, list[tuple[str, str]]]:
    """path -> the (family, arch) released variants whose layers hold it."""
    holders: dict[str, list[tuple[str, str]]] = {name: [] for name in ops.FAST_PATHS}
    for family in sorted(registered_backbones()):
        for arch in backbone_class(family).arch_zoo:
            model = ops.configure(_released(family, arch), {p: True for p in ops.FAST_PATHS
                                                            if not ops.FAST_PATHS[p].unavailable})
            for row in ops.describe(model):
                if row['on_in_model']:
                    holders[row['name']].append((family, arch))
    return holders


HOLDERS = _holders()
#: the paths whose property tests run on this PyTorch
TESTED = sorted(name for name, path in ops.FAST_PATHS.items() if not path.unavailable)
TRAIN_PATHS = [name for name in TESTED if 'train' in ops.FAST_PATHS[name].modes]


def _side(family: str, draw_int) -> tuple[int, int]:
    """Odd or even sides around the family's micro size (from one below it)."""
    height, width = backbone_class(family).check_archs.micro_size
    return draw_int(height - 1, height + 16), draw_int(width - 1, width + 16)


def _layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x`` (values unchanged) as a contiguous, channels-last or strided
    tensor, or (``broadcast``) a tensor broadcast along its last dim."""
    if layout == 'channels_last' and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if layout == 'strided':
        wide = x.new_zeros(*x.shape[:-1], 2 * x.shape[-1])
        wide[..., ::2] = x
        return wide[..., ::2]
    if layout == 'broadcast':
        return x[..., :1].expand_as(x)
    return x.contiguous()


def _setting(path: str, off: frozenset) -> dict:
    """``path`` on, the paths in ``off`` off, every other at its default."""
    return {path: True, **{name: False for name in off if name != path}}


def _run(model, x: torch.Tensor, setting, grad_layouts: Optional[list], seed: int) -> list:
    """Outputs, then (``grad_layouts`` given) the gradients of the input and
    of every parameter, under output gradients of those layouts."""
    ops.configure(model, setting)
    if grad_layouts is None:
        with torch.no_grad():
            return list(model(x))
    x = x.detach().requires_grad_()
    outs = model(x)
    generator = torch.Generator().manual_seed(seed)
    # drawn in float32 whatever the model's type: a float64 run gets the same values
    grads_out = [_layout(torch.randn(o.shape, generator=generator).to(o.dtype), layout)
                 for o, layout in zip(outs, grad_layouts)]
    params = list(model.parameters())
    grads = torch.autograd.grad(outs, [x, *params], grads_out, allow_unused=True)
    return [o.detach() for o in outs] + [g if g is not None else torch.zeros_like(p)
                                         for g, p in zip(grads, [x, *params])]


@st.composite
def examples(draw, path: str, train: bool):
    """One example for ``path``: a released variant holding it, its input
    and, in training, the output gradients' layouts."""
    family, arch = draw(st.sampled_from(HOLDERS[path]))
    height, width = _side(family, lambda lo, hi: draw(st.integers(lo, hi)))
    others = [name for name in TESTED if name != path]
    return dict(
        family=family, arch=arch, batch=draw(st.sampled_from((1, 3))), height=height,
        width=width, input_layout=draw(st.sampled_from(INPUT_LAYOUTS)),
        grad_layouts=[draw(st.sampled_from(GRAD_LAYOUTS)) for _ in range(4)] if train else None,
        off=frozenset(draw(st.sets(st.sampled_from(others)))) if others else frozenset(),
        seed=draw(st.integers(0, 2 ** 16)))


def check_example(path: str, family: str, arch: str, batch: int, height: int, width: int,
                  input_layout: str, grad_layouts: Optional[list], off: frozenset,
                  seed: int) -> None:
    """The path's outputs (and gradients) equal plain PyTorch's, and a
    second run gives the same bits."""
    model = _build(family, arch)
    torch.manual_seed(seed)
    x = _layout(torch.randn(batch, 3, height, width), input_layout)
    setting = _setting(path, off)
    fast = _run(model, x, setting, grad_layouts, seed)
    held = {row['name'] for row in ops.describe(model) if row['on_in_model']}
    assert path in held, f'{family} {arch} does not hold {path}'
    plain = _run(model, x, 'plain', grad_layouts, seed)
    names = result_names(len(model.out_indices), model, grads=grad_layouts is not None)
    where = f'{path} with {family} {arch}, {setting}'
    assert_grads_match(fast, plain, names, where, reference=lambda: _run(
        _build(family, arch, torch.float64), x.double(), 'plain', grad_layouts, seed))
    again = _run(model, x, setting, grad_layouts, seed)
    differ = [name for name, a, b in zip(names, fast, again) if not torch.equal(a, b)]
    assert not differ, f'{where}: a second run differs in {differ[:5]}'


@pytest.mark.parametrize('path', TRAIN_PATHS)
@SETTINGS
@given(data=st.data())
def test_training_with_the_path_equals_plain(path, data):
    check_example(path, **data.draw(examples(path, train=True)))


@pytest.mark.parametrize('path', [p for p in TESTED if 'inference' in ops.FAST_PATHS[p].modes])
@SETTINGS
@given(data=st.data())
def test_inference_with_the_path_equals_plain(path, data):
    check_example(path, **data.draw(examples(path, train=False)))


def _holder_inputs(model, x: torch.Tensor, path: str) -> list:
    """``(module, args, kwargs)`` of each module of ``model`` that holds
    ``path``'s switch, with the arguments it is called with on ``x`` in
    training (caught in a forward of their own: hooks keep the fast paths
    off)."""
    caught, handles = {}, []
    for module in model.modules():
        if any(isinstance(v, ops.Switch) and v.name == path for v in vars(module).values()):
            def catch(module, args, kwargs):
                caught.setdefault(module, (args, kwargs))
            handles.append(module.register_forward_pre_hook(catch, with_kwargs=True))
    model(x)
    for handle in handles:
        handle.remove()
    return [(m, *inputs) for m, inputs in caught.items()]


@contextlib.contextmanager
def _custom_functions():
    """Yield a list that receives ``(Function class, args)`` of each of the
    package's custom autograd functions applied inside."""
    caught, original = [], torch.autograd.Function.__dict__['apply']

    def apply(cls, *args):
        if cls.__module__.startswith('vattn_mm.'):
            caught.append((cls, args))
        return original.__get__(None, cls)(*args)
    torch.autograd.Function.apply = classmethod(apply)
    try:
        yield caught
    finally:
        torch.autograd.Function.apply = original


def _gradcheck(fn, args: tuple, kwargs: dict, params=()) -> bool:
    """gradcheck (fast mode: one random direction per input and output,
    with an absolute tolerance small enough that a 1e-4 relative error
    fails) of ``fn(*args, **kwargs)`` over its floating tensor arguments, in float64,
    and ``params`` (a module's named parameters, passed by
    functional_call)."""
    slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
    names = [name for name, _ in params]

    def call(*values):
        full = list(args)
        for i, value in zip(slots, values):
            full[i] = value
        if not names:
            out = fn(*full, **kwargs)
        else:
            out = torch.func.functional_call(fn, dict(zip(names, values[len(slots):])),
                                             tuple(full), kwargs)
        return out[0] if isinstance(out, tuple) else out

    inputs = [args[i].detach().double().requires_grad_() for i in slots]
    inputs += [p.detach().requires_grad_() for _, p in params]
    return torch.autograd.gradcheck(call, tuple(inputs), fast_mode=True, eps=1e-6, atol=1e-9,
                                    rtol=1e-4)


#: families whose token mixer computes in float32 whatever the input dtype
#: (QuadTree's core, as the official code): float64 finite differences do
#: not apply to their layers, only to the custom functions they call
FLOAT32_CORE = ('QuadTree',)


@pytest.mark.parametrize('path', TRAIN_PATHS)
@GRADCHECK_SETTINGS
@given(data=st.data())
def test_gradcheck_float64(path, data):
    """``gradcheck`` in float64, path on, batch 1, of each custom autograd
    function the drawn variant applies, on the inputs of its last call; for a
    path that applies none (saved-tensor hooks, layouts), of each module
    holding the path, over its inputs and parameters."""
    example = data.draw(examples(path, train=True))
    model = ops.configure(_build(example['family'], example['arch'], torch.float64),
                          _setting(path, example['off']))
    torch.manual_seed(example['seed'])
    x = _layout(torch.randn(1, 3, example['height'], example['width'], dtype=torch.float64),
                example['input_layout'])
    with _custom_functions() as applied:
        model(x.requires_grad_())
    last = {cls: args for cls, args in applied}   # each one's last call: the smallest map
    for cls, args in last.items():
        assert _gradcheck(cls.apply, args, {}), cls.__name__
    if not applied and example['family'] not in FLOAT32_CORE:
        for module, args, kwargs in _holder_inputs(model, x.detach(), path):
            assert _gradcheck(module, args, kwargs, list(module.named_parameters())), \
                type(module).__name__


#: examples that once failed: (path, example) -- the FocalNet LRF variants on
#: torch 2.1 (channels-last GELU gradient against an NCHW input, read wrong)
REGRESSIONS = [
    ('focal_recompute', dict(family='FocalNet', arch='tiny_lrf', batch=2, height=97, width=131,
                             input_layout='contiguous', grad_layouts=['contiguous'] * 4,
                             off=frozenset(), seed=0)),
    ('token_map_conv', dict(family='FocalNet', arch='small_lrf', batch=1, height=64, width=64,
                            input_layout='contiguous', grad_layouts=['contiguous'] * 4,
                            off=frozenset(), seed=1)),
]


@pytest.mark.parametrize('path, example', REGRESSIONS,
                         ids=[f"{p}-{e['arch']}" for p, e in REGRESSIONS])
def test_examples_that_once_failed(path, example):
    if ops.FAST_PATHS[path].unavailable:
        pytest.skip(f'{path}: {ops.FAST_PATHS[path].unavailable}')
    check_example(path, **example)


def test_every_registered_path_has_property_tests():
    """A new path is registered together with a released variant that holds
    it (so that the tests above draw it), or is unavailable here."""
    untested = sorted(name for name in TESTED if not HOLDERS[name])
    assert not untested, (f'no released variant holds {untested}: the property tests cannot '
                          'draw them; build it into a backbone (or mark it unavailable)')

"""Parameters and multiply-adds (MACs, the papers' "FLOPs") of a model.

Counting runs the model once under :class:`torch.utils.flop_counter.FlopCounterMode`
(a dispatcher-level counter: it sees every matrix product, convolution and
``scaled_dot_product_attention``, including those inside custom autograd
functions such as QuadTree's gathered score / aggregation ops, and works on
fake tensors without storage), and completes it where a dispatcher counter
cannot see the arithmetic:

* custom attention computed with elementwise products (DilateFormer's
  dilated local attention): a token mixer that declares ``macs`` is counted by
  that formula of its algorithm, whatever its implementation runs;
* elementwise products a paper counts, e.g. the gating of focal modulation
  (``flops()`` of the official ``FocalModulation``): a token mixer's
  ``elementwise_macs`` are added to what the counter sees in it
  (both declarations: :mod:`vattn_mm.layers.builder`, read from
  :data:`~vattn_mm.layers.MIXERS` when counting);
* ops implemented outside the dispatcher (mmcv's C++ deformable convolution in
  LITv2's token merging): a shape-equivalent stand-in with the same matrix
  product runs while counting (:data:`COUNT_STANDINS`).

Convention: one multiply-add of a matrix product or convolution counts 1;
biases, norms, activations, softmax and pooling count 0 (they are a few
percent at most; the official tables differ among themselves on them).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from ..layers import MIXERS, BiasedDeformConv2d

MacsFn = Callable[[nn.Module, torch.Size], int]


def declared_macs(hook: str) -> dict[type, MacsFn]:
    """``mixer class -> formula`` of every registered token mixer that
    declares ``hook`` (``'macs'`` or ``'elementwise_macs'``)."""
    return {cls: getattr(cls, hook) for cls in MIXERS.values() if hasattr(cls, hook)}


def _deform_conv_standin(module: BiasedDeformConv2d, x: torch.Tensor) -> torch.Tensor:
    """Same offset conv and the same im2col product as the deformable conv
    (bilinear sampling, like the LITv2 ``flops()``, is not counted)."""
    module.conv_offset(x)
    return F.conv2d(x, module.weight, module.bias, module.stride, module.padding)


#: module type -> forward used while counting (same products, dispatcher-visible)
COUNT_STANDINS: dict[type, Callable[..., Any]] = {
    BiasedDeformConv2d: _deform_conv_standin,
}


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


#: attention kernels missing from torch's flop registry (the CPU flash kernel is
#: an operator of its own in newer releases; torch 2.1 has none)
_EXTRA_FORMULAS = {
    getattr(torch.ops.aten, name): formula
    for name, formula in (('_scaled_dot_product_flash_attention_for_cpu', _cpu_sdpa_flops),)
    if hasattr(torch.ops.aten, name)
}


@dataclass
class Complexity:
    """Result of :func:`count_complexity`."""

    params: int
    macs: int
    #: MACs per module path (``Root.child.grandchild``), subtree totals
    by_module: dict[str, int] = field(default_factory=dict)

    def table(self, depth: int = 2) -> str:
        """Plain-text breakdown of MACs down to ``depth`` levels below the root."""
        rows = [(name, macs) for name, macs in self.by_module.items()
                if name.count('.') <= depth and macs]
        width = max((len(name) for name, _ in rows), default=6)
        lines = [f'{"module":<{width}}  {"GMACs":>9}  {"share":>6}']
        for name, macs in rows:
            lines.append(f'{name:<{width}}  {macs / 1e9:9.3f}  {macs / max(self.macs, 1):6.1%}')
        return '\n'.join(lines)


def _module_paths(model: nn.Module) -> dict[nn.Module, str]:
    """``module -> 'Root.child.grandchild'`` (the root is named by its class)."""
    root = type(model).__name__
    return {module: f'{root}.{name}' if name else root
            for name, module in model.named_modules()}


@contextlib.contextmanager
def _standins(model: nn.Module) -> Iterator[None]:
    """Swap in the :data:`COUNT_STANDINS` forwards for the duration."""
    patched = []
    for module in model.modules():
        fn = COUNT_STANDINS.get(type(module))
        if fn is not None:
            module.forward = fn.__get__(module)
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


class _Ledger:
    """Books the counter's running total on the innermost module being run
    (by call stack: a module called from elsewhere, like P2T's stage-shared
    pooling convs, is still booked under its own path), adds the mixers'
    ``elementwise_macs`` and replaces what runs inside a mixer that declares
    ``macs`` by its formula.  Amounts are in FLOPs (2 per multiply-add), like
    the counter's."""

    def __init__(self, model: nn.Module, counter: FlopCounterMode):
        self.paths = _module_paths(model)
        self.counter = counter
        self.opaque = declared_macs('macs')
        self.elementwise = declared_macs('elementwise_macs')
        self.stack = [self.paths[model]]
        self.opaque_depth = 0
        self.seen = 0
        self.own: dict[str, int] = {}

    def _book(self, path: str, flops: int) -> None:
        self.own[path] = self.own.get(path, 0) + flops

    def _flush(self) -> None:
        now = self.counter.get_total_flops()
        if not self.opaque_depth:
            self._book(self.stack[-1], now - self.seen)
        self.seen = now

    def _enter(self, module: nn.Module, args: tuple) -> None:
        self._flush()
        self.stack.append(self.paths[module])
        self.opaque_depth += type(module) in self.opaque

    def _leave(self, module: nn.Module, args: tuple, output: Any) -> None:
        self._flush()
        path = self.stack.pop()
        kind = type(module)
        if kind in self.opaque:
            self.opaque_depth -= 1
            if not self.opaque_depth:
                self._book(path, 2 * self.opaque[kind](module, args[0].shape))
        elif kind in self.elementwise and not self.opaque_depth:
            self._book(path, 2 * self.elementwise[kind](module, args[0].shape))

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        handles = []
        for module in self.paths:
            handles.append(module.register_forward_pre_hook(self._enter))
            handles.append(module.register_forward_hook(self._leave))
        try:
            yield
        finally:
            self._flush()
            for handle in handles:
                handle.remove()


def _roll_up(own: dict[str, int]) -> dict[str, int]:
    """Subtree totals: each path's own MACs summed into every prefix of it."""
    totals: dict[str, int] = {}
    for name, macs in own.items():
        parts = name.split('.')
        for i in range(1, len(parts) + 1):
            prefix = '.'.join(parts[:i])
            totals[prefix] = totals.get(prefix, 0) + macs
    return totals


def count_params(model: nn.Module) -> int:
    """Number of (distinct) parameters."""
    return sum(p.numel() for p in model.parameters())


def count_complexity(model: nn.Module, run: Callable[[], Any]) -> Complexity:
    """Count ``model``'s parameters and the MACs of ``run()`` (one forward of
    ``model`` on its input, under ``torch.no_grad``).

    Every count is shape-based, so the model and input may be fake tensors
    (:class:`torch._subclasses.fake_tensor.FakeTensorMode`).
    """
    counter = FlopCounterMode(display=False, custom_mapping=_EXTRA_FORMULAS)
    ledger = _Ledger(model, counter)
    with torch.no_grad(), _standins(model), ledger.hooks(), counter:
        run()
    by_module = _roll_up({name: flops // 2 for name, flops in ledger.own.items()})
    root = ledger.paths[model]
    ordered = {name: by_module[name] for name in ledger.paths.values() if by_module.get(name)}
    return Complexity(count_params(model), by_module.get(root, 0), ordered)

"""When a fast path may stand in for the plain code, and the schedules every
block runs through that decision.

**The gate, in one place.**  A layer holds a :class:`Switch`
per path (:func:`switch`; :func:`configure` re-resolves a model's), resolved
when it is built (the setting is static), and asks it at run time only for the
device and dtype (:meth:`Switch.on`).  The dynamic conditions
live here:

- :func:`is_exporting` / :func:`is_capturing`: a forward traced for ONNX or
  ``torch.jit`` (layers take their export forms), or captured by
  ``torch.compile`` (which partitions and recomputes by itself, and whose
  capture would unroll eager chunk loops);
- :func:`eager_autograd`: a custom autograd function may stand in for the
  graph autograd would record (recording, a CPU or CUDA tensor requiring
  grad, no capture, no Python dispatch mode such as FLOP counters or fake
  tensors, outside autocast unless the function handles it);
- :func:`eager_inference`: an inference kernel may stand in (no autograd, no
  capture, no dispatch mode, outside autocast);
- :func:`unobserved`: no forward or backward hooks on the modules whose
  ``forward`` a fused call bypasses, and no global forward hooks.

**The schedules** (paths ``recompute_norm``, ``recompute_act``,
``mlp_inference_chunks``):

- :func:`norm_recomputed`: a pre-norm's output is kept by the layers it feeds
  (their weight gradients need it) beside the norm's own input; inside this
  context it is stored as "the norm of that input" and recomputed when the
  backward reads it;
- :func:`act_linear`: ``linear(act(h))`` keeping only ``h``: autograd would
  keep ``h`` and ``act(h)``, the FFN's hidden activations, the largest tensors
  a pyramid backbone saves; the activation is recomputed in the backward,
  one hidden-width tensor less per FFN for one elementwise pass more
  (docs/benchmarks.md).  The gradients are autograd's kernels'
  (``gelu_backward``, ``threshold_backward``, ``hardswish_backward``, matrix
  products) up to float summation order;
- :func:`token_chunks`: without autograd, a token-wise function over long
  sequences ``chunk_tokens`` tokens at a time, so its hidden activation never
  exists for the whole map; every token's result is the same as unchunked.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules import module as _module
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ..utils.compat import autocast_available, autocast_enabled, autocast_query, is_compiling
from .activations import ACTIVATIONS, act_grad
from .registry import (ENV_VAR, FAST_PATHS, FastPath, Setting, check_setting,
                       register_fast_path)

# ------------------------------------------------------------------ switches
def _parse_env(text: str) -> Setting:
    text = text.strip()
    if text in ('', 'default', 'plain'):
        return text or None
    setting = {}
    for item in text.split(','):
        name, sep, value = item.partition('=')
        value = value.strip().lower()
        if not sep or value not in ('on', 'off', 'default', '1', '0', 'true', 'false'):
            raise ValueError(f'{ENV_VAR}={text!r}: expected "plain", "default" or '
                             f'"name=on|off|default,...", got the item {item!r}')
        setting[name.strip()] = (value if value == 'default'
                                 else value in ('on', '1', 'true'))
    return setting


def _devices(path: FastPath, value) -> tuple[str, ...]:
    if value is True:
        return path.devices
    if value is False:
        return ()
    if value == 'default' or value is None:
        return () if path.unproven else path.default_devices
    return tuple(value)


class Switch:
    """Whether one fast path is on, per device type and dtype; what a layer
    keeps from :func:`switch`."""

    __slots__ = ('name', 'devices', 'dtypes')

    def __init__(self, name: str, devices: Iterable[str], dtypes: Iterable[torch.dtype]):
        self.name = name
        self.devices = frozenset(devices)
        self.dtypes = frozenset(dtypes)

    def on(self, x: torch.Tensor) -> bool:
        """Whether the path may run on ``x`` (its device type and dtype)."""
        return x.device.type in self.devices and x.dtype in self.dtypes

    def __bool__(self) -> bool:
        return bool(self.devices)

    def __reduce__(self):
        return Switch, (self.name, tuple(sorted(self.devices)), tuple(self.dtypes))

    def __repr__(self) -> str:
        return f'Switch({self.name!r}, devices={sorted(self.devices)})'


def switch(name: str, setting: Setting = None):
    """The switch of path ``name`` under ``setting``, else the environment
    variable, else the registry's defaults."""
    if name not in FAST_PATHS:
        raise KeyError(f'no fast path named {name!r}; registered: {sorted(FAST_PATHS)}')
    path = FAST_PATHS[name]
    if path.unavailable:
        return Switch(name, (), path.dtypes)
    value = None
    for source in (check_setting(_parse_env(os.environ.get(ENV_VAR, ''))),
                   check_setting(setting)):
        if source is not None and name in source:
            value = source[name]
    return Switch(name, _devices(path, value), path.dtypes)


def configure(model: nn.Module, setting: Setting) -> nn.Module:
    """Re-resolve every :class:`Switch` held by ``model``'s modules under
    ``setting`` (what a backbone's ``fast_paths`` argument does); returns
    ``model``."""
    check_setting(setting)
    for module in model.modules():
        for attr, value in list(vars(module).items()):
            if isinstance(value, Switch):
                setattr(module, attr, switch(value.name, setting))
    return model


def describe(model: Optional[nn.Module] = None) -> list[dict]:
    """One row per registered path (name, reason, devices, default devices,
    dtypes, evidence, ``unavailable``: why this PyTorch cannot take it, or
    ``None``; ``unproven``: why it is off by default on this PyTorch, or
    ``None``) and, for ``model``, the devices where its modules have it on."""
    rows = []
    for path in FAST_PATHS.values():
        row = dict(name=path.name, reason=path.reason, devices=list(path.devices),
                   default_devices=list(path.default_devices),
                   dtypes=[str(d).replace('torch.', '') for d in path.dtypes],
                   evidence=path.evidence, modes=list(path.modes),
                   unavailable=path.unavailable, unproven=path.unproven)
        if model is not None:
            on = {d for m in model.modules() for v in vars(m).values()
                  if isinstance(v, Switch) and v.name == path.name for d in v.devices}
            row['on_in_model'] = sorted(on)
        rows.append(row)
    return rows


register_fast_path('recompute_act', "FFNs keep the activation's input only and recompute "
                   'the activation in the backward: one hidden-width map less saved',
                   modes=('train', ))
register_fast_path('recompute_norm', 'pre-norm outputs are recomputed from the norm input '
                   'in the backward instead of being saved', modes=('train', ),
                   needs=(hasattr(torch._C._autograd, '_top_saved_tensors_default_hooks'),
                          'a query whether saved-tensor hooks are active (torch._C._autograd.'
                          '_top_saved_tensors_default_hooks, not in torch 2.1)'))
register_fast_path('mlp_inference_chunks', 'MLP inference over chunks of tokens: the hidden '
                   'activation never exists for the whole map',
                   modes=('inference', ))


# ------------------------------------------------------------------ capture
_STATE = threading.local()


def is_exporting() -> bool:
    """True inside :func:`export_paths`, while ``torch.onnx.export`` runs or
    while ``torch.jit`` traces: layers then take their export paths (plain
    operators with an ONNX form, shape-generic code in place of Python
    branches on concrete sizes)."""
    return (getattr(_STATE, 'forced', False) or torch.onnx.is_in_onnx_export()
            or torch.jit.is_tracing())


def is_capturing() -> bool:
    """True while a forward is captured as a graph: exported (see
    :func:`is_exporting`) or traced by ``torch.compile``. Layers then skip
    their eager-only memory chunking, whose Python loops a capture would
    unroll (hundreds of copies at detection sizes)."""
    return is_exporting() or is_compiling()


@contextlib.contextmanager
def export_paths(enabled: bool = True) -> Iterator[None]:
    """Run the export paths in eager mode too (to test them equal to the
    normal ones); the previous setting is restored on exit."""
    previous = getattr(_STATE, 'forced', False)
    _STATE.forced = enabled
    try:
        yield
    finally:
        _STATE.forced = previous


# --------------------------------------------------------------------- gate
#: whether autocast is on, per device type (PyTorch's own queries, chosen once)
_AUTOCAST_ON = {device: autocast_query(device) for device in ('cpu', 'cuda')}


def autocast_on(device: str) -> bool:
    """Whether autocast is on for device type ``device``."""
    query = _AUTOCAST_ON.get(device)
    if query is None:
        return autocast_available(device) and autocast_enabled(device)
    return query()


def autocast_off(device: str):
    """A context with autocast off on device type ``device`` (nothing to turn
    off where it has none: meta tensors)."""
    if device in _AUTOCAST_ON or autocast_available(device):
        return torch.autocast(device, enabled=False)
    return contextlib.nullcontext()


def eager_autograd(*tensors: torch.Tensor, under_autocast: bool = False) -> bool:
    """Whether a custom autograd function may stand in for the graph autograd
    would record of an operation on ``tensors`` (its inputs and parameters):
    autograd recording and one of them requiring grad, a CPU or CUDA device,
    no capture, no Python dispatch mode and, unless ``under_autocast``,
    outside autocast."""
    # is_capturing first: under torch.compile the dispatch-mode query is a graph break
    if not torch.is_grad_enabled() or is_capturing():
        return False
    device = tensors[0].device.type
    return (device in _AUTOCAST_ON and any(t.requires_grad for t in tensors)
            and (under_autocast or not _AUTOCAST_ON[device]())
            and _get_current_dispatch_mode() is None)


def eager_inference(x: torch.Tensor) -> bool:
    """Whether an inference-only kernel (no backward) may run on ``x``: no
    autograd recording, no capture (inductor emits such kernels by itself),
    a CPU or CUDA device outside autocast, no Python dispatch mode."""
    if torch.is_grad_enabled() or is_capturing():
        return False
    device = x.device.type
    return (device in _AUTOCAST_ON and not _AUTOCAST_ON[device]()
            and _get_current_dispatch_mode() is None)


def unobserved(*modules: nn.Module) -> bool:
    """No forward or backward hooks on ``modules`` and no global forward
    hooks: a call standing in for their ``forward`` goes unnoticed."""
    return not (_module._global_forward_hooks or _module._global_forward_pre_hooks
                or any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks
                       or m._backward_pre_hooks for m in modules))


def can_recompute(x: torch.Tensor, act: nn.Module, *modules: nn.Module) -> bool:
    """Whether a custom autograd function that recomputes ``act`` in its
    backward may replace ``act`` and ``modules`` applied to ``x``: an
    activation with a listed gradient (:data:`~.activations.ACTIVATIONS`),
    not in place, eager autograd, nobody watching."""
    return (type(act) in ACTIVATIONS and not getattr(act, 'inplace', False)
            and eager_autograd(x, *(p for m in modules for p in m.parameters()))
            and unobserved(act, *modules))


# ---------------------------------------------------------------- schedules
def recomputes_act(h: torch.Tensor, act: nn.Module, linear: nn.Module,
                   drop: nn.Module) -> bool:
    """Whether :func:`act_linear` may recompute ``act`` in
    ``linear(drop(act(h)))`` (its switch aside): a plain ``nn.Linear``, no
    active dropout, :func:`can_recompute`."""
    return (type(linear) is nn.Linear and can_recompute(h, act, linear, drop)
            and (not drop.training or not isinstance(drop, nn.Dropout) or drop.p == 0))


class ActLinear(torch.autograd.Function):
    """``linear(act(h))`` saving ``h`` and the weight only."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias, act: nn.Module):
        ctx.act = act
        ctx.save_for_backward(h, weight)
        return F.linear(act(h), weight, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        h, weight = ctx.saved_tensors
        need_h, need_w, need_b, _ = ctx.needs_input_grad
        flat = grad.reshape(-1, grad.shape[-1])
        grad_h = grad_w = grad_b = None
        if need_b:
            grad_b = flat.sum(0)
        if not (need_w or need_h):
            return grad_h, grad_w, grad_b, None
        # one hidden-width buffer: act(h), then the gradient of act(h), then of h
        hidden = ctx.act(h)
        if need_w:
            grad_w = flat.t().mm(hidden.reshape(-1, h.shape[-1]))
        if need_h:
            if not hidden.is_contiguous():
                hidden = torch.empty_like(h, memory_format=torch.contiguous_format)
            torch.mm(flat, weight, out=hidden.view(-1, h.shape[-1]))
            grad_h = act_grad(ctx.act, hidden, h, out=hidden)
        return grad_h, grad_w, grad_b, None


def act_linear(h: torch.Tensor, act: nn.Module, linear: nn.Module, drop: nn.Module,
               switch: Switch) -> torch.Tensor:
    """``linear(drop(act(h)))``, keeping only ``h`` for the backward where
    ``switch`` is on for ``h`` and :func:`recomputes_act` allows."""
    if switch.on(h) and recomputes_act(h, act, linear, drop):
        return ActLinear.apply(h, linear.weight, linear.bias, act)
    return linear(drop(act(h)))


def _saved_tensor_hooks_free() -> bool:
    autograd = torch._C._autograd
    return (autograd._saved_tensors_hooks_is_enabled()
            and autograd._top_saved_tensors_default_hooks(False) is None)


def recomputes_norm(x: torch.Tensor, norm: nn.Module) -> bool:
    """Whether :func:`norm_recomputed` may recompute ``norm(x)`` (its switch
    aside): an ``nn.LayerNorm``, eager autograd, no hooks on it, no other
    saved-tensor hooks active (``with_cp``'s checkpointing, offloading)."""
    return (type(norm) is nn.LayerNorm and eager_autograd(x, *norm.parameters())
            and unobserved(norm) and _saved_tensor_hooks_free())


@contextlib.contextmanager
def norm_recomputed(x: torch.Tensor, norm: nn.Module, switch: Switch) -> Iterator[torch.Tensor]:
    """Yield ``norm(x)``; what the code in the ``with`` block saves for the
    backward of it (or of views of it) is recomputed from ``x`` when read,
    where ``switch`` is on for ``x`` and :func:`recomputes_norm` allows (else
    saved as usual)."""
    out = norm(x)
    if not (switch.on(x) and recomputes_norm(x, norm)) or out.numel() == 0:
        yield out
        return
    # (the hooks live as long as what they saved: they must not hold ``out``)
    storage, version, dtype = out.untyped_storage().data_ptr(), out._version, out.dtype

    def pack(t: torch.Tensor):
        # views of the output, not changed in place since the norm made it
        if (t.untyped_storage().data_ptr() != storage or t.dtype != dtype
                or t._version != version):
            return t
        return x, t.size(), t.stride(), t.storage_offset()

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        source, size, stride, offset = packed
        with torch.no_grad():
            return norm(source).as_strided(size, stride, offset)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield out


def token_chunks(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                 chunk_tokens: Optional[int], switch: Switch) -> torch.Tensor:
    """``fn(x)`` for a token-wise ``fn`` on (..., C) tokens; without autograd,
    where ``switch`` is on for ``x``, ``chunk_tokens`` tokens at a time."""
    # a captured graph would unroll the chunk loop (and freeze the token count)
    if (chunk_tokens is None or not switch.on(x) or torch.is_grad_enabled() or is_capturing()
            or x.shape[:-1].numel() <= chunk_tokens):
        return fn(x)
    flat = x.reshape(-1, x.shape[-1])
    first = fn(flat[:chunk_tokens])  # its dtype is the output's (autocast)
    out = first.new_empty(flat.shape[0], first.shape[-1])
    out[:chunk_tokens] = first
    for start in range(chunk_tokens, flat.shape[0], chunk_tokens):
        out[start:start + chunk_tokens] = fn(flat[start:start + chunk_tokens])
    return out.view(*x.shape[:-1], -1)

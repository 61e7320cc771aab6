"""The registry of fast paths: every optional kernel, custom autograd
function or memory-saving schedule that stands in for plain PyTorch.

Each :class:`FastPath` has a name, a one-line reason, the devices it can run
on, the devices and dtypes where it is on by default and a plain PyTorch
fallback computing the same values (the layer's ordinary code).  A path is on
by default only where a recorded measurement says it wins: on CPU from
docs/benchmarks.md; on CUDA only after a GPU acceptance run
(``.dev_scripts/run_gpu_check.py``) recorded it.

Users choose with a setting, most specific first:

- the backbone's ``fast_paths`` argument (a config entry:
  ``backbone=dict(..., fast_paths='plain')`` or
  ``fast_paths=dict(recompute_act=False)``), applied by
  :func:`~vattn_mm.ops.autograd.configure`;
- the environment variable ``VATTN_FAST_PATHS`` (``plain``, ``default``, or
  ``name=on|off|default,...``), read when a layer is built;
- the registry's defaults.

A path is on by default only on a torch series (major.minor) in
:data:`PROVEN_TORCH`, where its property tests (outputs and gradients equal to
the plain code's, float64 gradcheck, bitwise-repeatable backward) passed; on
any other torch it stays off unless a setting names it, and
:func:`~vattn_mm.ops.autograd.describe` says why.

A setting is ``'default'``, ``'plain'`` (every path off) or a mapping
``{name: value}`` where ``value`` is ``True`` (on wherever it can run),
``False`` (off), ``'default'`` or a sequence of device types
(``('cpu', 'cuda')``).

Layers hold a :class:`~vattn_mm.ops.autograd.Switch` per path, resolved
when built (the setting is static), and ask it at run time only for the device
and dtype; the switches and the dynamic conditions (autograd recording, hooks,
autocast, capture) are in one place, :mod:`vattn_mm.ops.autograd`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

import torch

#: the environment variable read by :func:`vattn_mm.ops.autograd.switch`
ENV_VAR = 'VATTN_FAST_PATHS'

_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
#: what a path can change: a training step (forward + backward) and / or inference
MODES = ('train', 'inference')

Setting = Union[None, str, Mapping[str, Union[bool, str, Iterable[str]]]]

#: the torch series on which every registered path passed its property tests
#: (``tests/ops/test_fast_path_properties.py``): the CI jobs' torch (floor,
#: pinned, newest)
PROVEN_TORCH = ('2.1', '2.14', '2.15')


def torch_series(version: str = torch.__version__) -> str:
    """``'2.14'`` for ``'2.14.1+cu130'``."""
    return '.'.join(version.split('+')[0].split('.')[:2])


def unproven_reason(version: str = torch.__version__) -> Optional[str]:
    """Why no path is on by default under torch ``version``, or ``None``
    where its series is in :data:`PROVEN_TORCH`."""
    series = torch_series(version)
    if series in PROVEN_TORCH:
        return None
    return (f'not proven on torch {series} (the property tests passed on torch '
            f"{', '.join(PROVEN_TORCH)}): off unless a setting names it")


@dataclass(frozen=True)
class FastPath:
    """One registered fast path.

    Args:
        name: the key users switch it with (``'recompute_act'``).
        reason: one line: what it saves and how.
        devices: device types it can run on at all.
        default_devices: device types where it is on by default (a subset of
            ``devices``, backed by a recorded measurement).
        dtypes: input dtypes it takes.
        evidence: where the measurement behind the defaults is recorded.
        modes: where it acts: ``'train'`` (a step with autograd) and / or
            ``'inference'`` (no autograd); the GPU check times it there.
        unavailable: why the running PyTorch cannot take it (an API it needs
            is missing), or ``None``: where set, the path is off whatever the
            setting, and :func:`describe` says why.
        unproven: why it is off by default on the running PyTorch (its
            series is not in :data:`PROVEN_TORCH`), or ``None``; a setting
            that names the path still turns it on.
    """

    name: str
    reason: str
    devices: tuple[str, ...] = ('cpu', 'cuda')
    default_devices: tuple[str, ...] = ('cpu',)
    dtypes: tuple[torch.dtype, ...] = _FLOATS
    evidence: str = 'docs/benchmarks.md'
    modes: tuple[str, ...] = MODES
    unavailable: Optional[str] = None
    unproven: Optional[str] = None

    def __post_init__(self):
        if not self.modes or set(self.modes) - set(MODES):
            raise ValueError(f'fast path {self.name!r}: modes must be among {MODES}, '
                             f'got {self.modes!r}')
        extra = set(self.default_devices) - set(self.devices)
        if extra:
            raise ValueError(f'fast path {self.name!r}: default devices {sorted(extra)} '
                             f'are not among the devices it runs on {list(self.devices)}')


#: every registered fast path by name
FAST_PATHS: dict[str, FastPath] = {}


def register_fast_path(name: str, reason: str, *, devices: Iterable[str] = ('cpu', 'cuda'),
                       default_devices: Iterable[str] = ('cpu',),
                       dtypes: Iterable[torch.dtype] = _FLOATS,
                       evidence: str = 'docs/benchmarks.md',
                       modes: Iterable[str] = MODES,
                       needs: Optional[tuple[bool, str]] = None) -> FastPath:
    """Register a fast path (once per name) and return it.  ``needs`` is
    ``(available, what)``: whether the running PyTorch has what the path
    needs, and what that is (``'torch >= 2.3 (torch.compiler.is_compiling)'``);
    an unavailable path is off everywhere."""
    if name in FAST_PATHS:
        raise KeyError(f'fast path {name!r} is already registered')
    unavailable = None
    if needs is not None and not needs[0]:
        unavailable = f'needs {needs[1]}; this is torch {torch.__version__}'
    path = FastPath(name, reason, tuple(devices), tuple(default_devices), tuple(dtypes),
                    evidence, tuple(modes), unavailable, unproven_reason())
    FAST_PATHS[name] = path
    return path


def check_setting(setting: Setting) -> Optional[dict]:
    """The setting as ``{name: value}`` (``None`` for the defaults), every
    name registered and every value valid; a clear error otherwise."""
    if setting is None or setting == 'default':
        return None
    if setting == 'plain':
        return {name: False for name in FAST_PATHS}
    if isinstance(setting, str) or not isinstance(setting, Mapping):
        raise ValueError(f"fast_paths={setting!r}: expected 'default', 'plain' or a dict "
                         '{name: True | False | "default" | devices}')
    unknown = sorted(set(setting) - set(FAST_PATHS))
    if unknown:
        raise ValueError(f'fast_paths: unknown path(s) {unknown}; registered: '
                         f'{sorted(FAST_PATHS)}')
    for name, value in setting.items():
        if isinstance(value, (bool, str)):
            if isinstance(value, str) and value != 'default':
                raise ValueError(f'fast_paths[{name!r}]={value!r}: expected True, False, '
                                 "'default' or a sequence of device types")
            continue
        devices = list(value)
        bad = sorted(set(devices) - set(FAST_PATHS[name].devices))
        if bad:
            raise ValueError(f'fast_paths[{name!r}]: {name} does not run on {bad} (it runs '
                             f'on {list(FAST_PATHS[name].devices)})')
    return dict(setting)

"""What differs between the supported PyTorch releases (2.1 and newer), in one
place: every call to an API newer than the floor goes through a name here, so
the layers read the same on every release.

- :func:`is_compiling`: ``torch.compiler.is_compiling`` (2.3); on older
  releases ``torch._dynamo.is_compiling``.
- :func:`autocast_enabled` / :func:`autocast_query` / :func:`autocast_available`: the per-device
  ``torch.is_autocast_enabled(device_type)`` and
  ``torch.amp.is_autocast_available`` (2.4); on older releases the CPU and
  CUDA queries of those releases.
- :func:`safe_globals` / :func:`get_safe_globals` / :func:`load_weights_only`:
  the weights-only unpickler's allow-list (2.5 / 2.4); on older releases a
  pickle unpickler restricted to the same globals reads such files.
- :func:`grad_scaler`: ``torch.amp.GradScaler(device)`` (2.3); on older
  releases ``torch.cuda.amp.GradScaler`` (CUDA only).

:data:`TORCH_VERSION` is the running release as ``(major, minor)``; fast paths
declare the release they need with it (:mod:`vattn_mm.ops.registry`).
"""
from __future__ import annotations

import contextlib
import functools
import pickle
import re
import types
from typing import Callable, Iterable, Iterator

import torch

#: the running torch release as (major, minor)
TORCH_VERSION: tuple[int, int] = tuple(  # type: ignore[assignment]
    int(part) for part in re.match(r'(\d+)\.(\d+)', torch.__version__).groups())
#: the oldest torch release vattn-mm supports
MIN_TORCH = (2, 1)


def _is_compiling_fallback() -> bool:
    import torch._dynamo  # imported on first use: it costs ~0.3 s at import
    return torch._dynamo.is_compiling()


#: whether ``torch.compile`` is tracing the caller
is_compiling: Callable[[], bool] = getattr(getattr(torch, 'compiler', None), 'is_compiling',
                                           _is_compiling_fallback)

if TORCH_VERSION >= (2, 4):
    def autocast_enabled(device_type: str) -> bool:
        """Whether autocast is on for ``device_type`` ('cpu', 'cuda', ...)."""
        return torch.is_autocast_enabled(device_type)

    def autocast_query(device_type: str) -> Callable[[], bool]:
        """PyTorch's own query whether autocast is on for ``device_type``
        ('cpu' or 'cuda'), as a call without arguments (for hot paths)."""
        return functools.partial(torch.is_autocast_enabled, device_type)

    def autocast_available(device_type: str) -> bool:
        """Whether ``torch.autocast`` supports ``device_type``."""
        return torch.amp.is_autocast_available(device_type)
else:
    def autocast_enabled(device_type: str) -> bool:
        """Whether autocast is on for ``device_type`` ('cpu', 'cuda', ...)."""
        if device_type == 'cpu':
            return torch.is_autocast_cpu_enabled()
        if device_type == 'cuda':
            return torch.is_autocast_enabled()
        return False

    def autocast_query(device_type: str) -> Callable[[], bool]:
        """PyTorch's own query whether autocast is on for ``device_type``
        ('cpu' or 'cuda'), as a call without arguments (for hot paths)."""
        return torch.is_autocast_cpu_enabled if device_type == 'cpu' else torch.is_autocast_enabled

    def autocast_available(device_type: str) -> bool:
        """Whether ``torch.autocast`` supports ``device_type``."""
        return device_type in ('cpu', 'cuda')


def get_safe_globals() -> list:
    """The weights-only unpickler's user allow-list (empty before torch 2.4,
    which has none)."""
    getter = getattr(torch.serialization, 'get_safe_globals', None)
    return list(getter()) if getter else []


@contextlib.contextmanager
def safe_globals(items: Iterable) -> Iterator[None]:
    """Allow ``items`` (objects, or ``(object, 'module.name')`` pairs) in
    ``torch.load(weights_only=True)`` inside the block; the allow-list is as
    before after it.  torch < 2.5 has no such context: there the block allows
    nothing more (:func:`load_weights_only` reads such files instead)."""
    if not hasattr(torch.serialization, 'safe_globals'):
        yield
        return
    with torch.serialization.safe_globals(list(items)):
        yield


def _qualified_name(item) -> tuple[str, object]:
    if isinstance(item, tuple):
        obj, name = item
        return name, obj
    return f'{item.__module__}.{item.__qualname__}', item


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only allow-listed globals (the standard restriction of
    ``find_class``); torch's loader subclasses it for its storages."""

    allowed: dict = {}

    def find_class(self, module: str, name: str):
        found = self.allowed.get(f'{module}.{name}')
        if found is None:
            raise pickle.UnpicklingError(f'Unsupported global: GLOBAL {module}.{name}')
        return found


def load_weights_only(path: str, map_location=None, allowed: Iterable = ()):
    """``torch.load`` of tensors, containers and the ``allowed`` objects only.

    torch >= 2.5: its weights-only unpickler with ``allowed`` added for the
    call.  Older releases build no objects but tensors and dicts in their
    weights-only unpickler and have no allow-list, so there a pickle
    unpickler restricted to torch's own weights-only globals plus ``allowed``
    reads the file (refusing everything else with ``UnpicklingError``)."""
    allowed = list(allowed)
    if hasattr(torch.serialization, 'safe_globals'):
        with safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)
    from torch._weights_only_unpickler import _get_allowed_globals
    names = {**_get_allowed_globals(), **dict(_qualified_name(item) for item in allowed)}
    unpickler = type('Unpickler', (_RestrictedUnpickler,), {'allowed': names})
    module = types.SimpleNamespace(__name__='restricted_pickle', Unpickler=unpickler,
                                   load=lambda f, **kw: unpickler(f, **kw).load())
    return torch.load(path, map_location=map_location, weights_only=False, pickle_module=module)


def grad_scaler(device_type: str, enabled: bool = True, **kwargs):
    """A loss scaler for float16 training on ``device_type`` (``kwargs``:
    ``init_scale``, ...)."""
    if TORCH_VERSION >= (2, 3):
        return torch.amp.GradScaler(device_type, enabled=enabled, **kwargs)
    if device_type != 'cuda' and enabled:
        raise RuntimeError(f'torch {torch.__version__} has no GradScaler for {device_type!r} '
                           '(torch >= 2.3 has one for every device)')
    return torch.cuda.amp.GradScaler(enabled=enabled, **kwargs)

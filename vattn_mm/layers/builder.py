"""Building the parts of a pyramid stage from configs.

A **token mixer** is a registered module called as ``mixer(tokens, (H, W))``
that returns tokens of the same shape.  The stage builder fills in what it
knows (``embed_dims``, ``num_heads`` where the mixer takes it) and the
mixer's own defaults for the stage (``stage_defaults``), so
``dict(type='HiLoAttention')`` is a complete config.

A mixer is one file: besides its math, its class declares what the stage
builder, the test suite and the analysis tools read from :data:`MIXERS`
(no list elsewhere needs a new mixer).  Declarations:

* ``scaling = 'linear' | 'quadratic'`` (required by the suite): how the
  mixer's multiply-adds grow with the number of tokens ``N`` at a fixed width
  and fixed settings.  The suite checks a ``'linear'`` mixer's MACs and
  largest tensor grow 4x per 4x tokens.
* ``full_attention = True``: the mixer attends every token to every token
  and holds an ``N x N`` matrix (global self-attention); every other mixer
  is checked to hold none.
* ``inner_width``: the constructor option that sets the channels of the
  queries, keys and values (``'attn_dims'``; ``'modulation_dims'`` for focal
  modulation), what a study matches costs with; the suite checks a wider one keeps
  the token shapes, adds parameters and trains.
* ``macs(self, x_shape) -> int``: all of the mixer's multiply-adds on tokens
  of shape ``(B, N, C)``, by the formula of its algorithm, for mixers whose
  arithmetic a dispatcher-level counter cannot see (elementwise products,
  e.g. DilateFormer's local attention); what its implementation runs is then
  not counted (:func:`vattn_mm.analysis.count_complexity`).
* ``elementwise_macs(self, x_shape) -> int``: multiply-adds the mixer
  computes with elementwise products (focal modulation's gates), added to
  what the counter sees.

Optional hooks of the stage builder:

* ``stage_defaults(stage) -> dict``: hyper-parameters the mixer's paper uses
  in stage ``stage`` (0 = stride 4) of a four-stage pyramid, e.g. the
  spatial-reduction ratios 8/4/2/1; a config's own values win.
* ``block_defaults(block) -> dict``: hyper-parameters for block ``block``
  (0 = first) of a stage, over the stage defaults: for mixers that alternate
  between blocks, e.g. Swin's shift in odd blocks only; a config's own
  values win.
* ``build_shared(embed_dims, **cfg) -> nn.Module`` and ``shared_name``: a
  module (parameters) every block of the stage shares, e.g. P2T's pooling
  convs; the stage owns it under ``shared_name`` and passes it to each mixer
  call as an extra argument.
* ``size_multiple`` (property): what the sides of the map the mixer gets
  must be divisible by (QuadTree attention's pyramid levels); the backbone
  pads its input accordingly.

A mixer file is imported explicitly by ``vattn_mm/layers/__init__.py`` (one
line; no discovery of files by name), which registers it in :data:`LAYERS`
(every layer a config may name, mirrored into MMEngine's ``MODELS`` where it
is installed: :mod:`vattn_mm.utils.registry`).

A **position module** (e.g. :class:`~vattn_mm.layers.ConvPosEnc`) is one
file too, registered with :func:`register_position` (listed in
:data:`POSITIONS`), called as ``pe(tokens, (H, W))``.  It returns a
positional term the skeleton adds to the tokens (``combine = 'add'``,
default) or a gate it multiplies them with (``combine = 'multiply'``, ResT's
pixel attention), before every block (``where='block'``), once after the
stage's first block (``where='after_first_block'``) or once right after the
stage's patch embedding (``where='embed'``, e.g.
:class:`~vattn_mm.layers.AbsolutePosEmbed`); the class's ``default_where``
is the place a config without ``where`` gets.  ``stage_defaults(stage)``
(optional, as for mixers) gives settings per stage, e.g. a learned table's
training grid.  Position terms that live inside attention (relative biases,
LePE) are options of their mixers, listed in the mixer's
``position_variants`` (``{name: mixer settings}``), which the position
suite runs too.

A **tokeniser** (patch embedding or stem) is registered with
:func:`register_tokeniser` (listed in :data:`TOKENISERS`) and called as
``embed(image_or_map) -> (tokens, (H, W))``; ``tokeniser_roles`` says where
the skeleton may use it: ``'stem'`` (stage 0, ``in_channels`` /
``embed_dims`` filled in, stride 4) and ``'patch_embed'`` (every stage,
``stride`` filled in too).
"""
from __future__ import annotations

import copy
import inspect
from typing import Any, Mapping, Optional, Union

from torch import nn

from ..utils.registry import Registry, mmengine_models

Cfg = Mapping[str, Any]
POSITION_PLACES = ('block', 'after_first_block', 'embed')
#: how the skeleton combines a position module's output with the tokens
POSITION_COMBINES = ('add', 'multiply')
#: where the skeleton may use a tokeniser
TOKENISER_ROLES = ('stem', 'patch_embed')
#: what a mixer's ``scaling`` may say
SCALINGS = ('linear', 'quadratic')
#: every layer a config may name: mixers, position modules, tokenisers, FFNs, ...
LAYERS = Registry('layer')
#: class decorator: register a layer in :data:`LAYERS`
register_layer = LAYERS.register
#: every token mixer registered with :func:`register_mixer`, by name
MIXERS: dict[str, type] = {}
#: every position module registered with :func:`register_position`, by name
POSITIONS: dict[str, type] = {}
#: every patch embedding / stem registered with :func:`register_tokeniser`, by name
TOKENISERS: dict[str, type] = {}


def register_mixer(cls: type) -> type:
    """Class decorator: register a token mixer in :data:`LAYERS` and list it
    in :data:`MIXERS` (what the tests and the analysis read;
    the declarations are checked here, see the module docstring)."""
    name = cls.__name__
    scaling = getattr(cls, 'scaling', None)
    if scaling is not None and scaling not in SCALINGS:
        raise ValueError(f'mixer {name}: scaling={scaling!r}, expected one of {SCALINGS}')
    return _listed(cls, MIXERS)


def _listed(cls: type, listing: dict) -> type:
    """``cls`` registered in :data:`LAYERS` and listed in ``listing`` by name."""
    register_layer(cls)
    listing[cls.__name__] = cls
    return cls


def _declared(cls: type, kind: str, attr: str, default: str, choices: tuple) -> None:
    """Raise a ``ValueError`` naming ``cls`` unless its ``attr`` is one of ``choices``."""
    value = getattr(cls, attr, default)
    if value not in choices:
        raise ValueError(f'{kind} {cls.__name__}: {attr}={value!r}, expected one of {choices}')


def register_position(cls: type) -> type:
    """Class decorator: register a position module in :data:`LAYERS` and list it
    in :data:`POSITIONS` (``default_where`` and ``combine`` are checked)."""
    _declared(cls, 'position module', 'default_where', 'block', POSITION_PLACES)
    _declared(cls, 'position module', 'combine', 'add', POSITION_COMBINES)
    return _listed(cls, POSITIONS)


def register_tokeniser(cls: type) -> type:
    """Class decorator: register a patch embedding / stem in :data:`LAYERS` and
    list it in :data:`TOKENISERS` (``tokeniser_roles`` is checked)."""
    name = cls.__name__
    roles = getattr(cls, 'tokeniser_roles', None)
    if not roles or not set(roles) <= set(TOKENISER_ROLES):
        raise ValueError(f'tokeniser {name}: tokeniser_roles={roles!r}, expected a non-empty '
                         f'subset of {TOKENISER_ROLES}')
    return _listed(cls, TOKENISERS)


def registered_class(cfg: Cfg, role: str) -> type:
    """The class named by ``cfg['type']`` (a registered name or a class).

    Names are looked up in :data:`LAYERS` first, so a same-named module of
    a downstream scope (mmdet, mmseg) never replaces them, then in MMEngine's
    root ``MODELS`` where MMEngine is installed (layers registered there).
    """
    if not isinstance(cfg, Mapping) or 'type' not in cfg:
        raise TypeError(f'{role} config must be a dict with a "type", got {cfg!r}')
    kind = cfg['type']
    if isinstance(kind, type):
        return kind
    cls = LAYERS.get(kind)
    models = mmengine_models() if cls is None else None
    if models is not None:
        cls = models.get(kind)
    if cls is None:
        known = f' (vattn-mm mixers: {sorted(MIXERS)})' if role == 'mixer' else ''
        raise KeyError(f'{role} type {kind!r} is not registered{known}')
    return cls


def _accepts(cls: type, name: str) -> bool:
    params = inspect.signature(cls.__init__).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def mixer_kwargs(cfg: Cfg, embed_dims: int, num_heads: Optional[int], stage: int,
                 block: int = 0) -> dict:
    """Constructor arguments of the mixer ``cfg`` in block ``block`` of stage
    ``stage``: the mixer's stage defaults, its block defaults, then the
    config, with ``embed_dims`` and (if the mixer takes it) ``num_heads``
    filled in."""
    cls = registered_class(cfg, 'mixer')
    defaults = cls.stage_defaults(stage) if hasattr(cls, 'stage_defaults') else {}
    if hasattr(cls, 'block_defaults'):
        defaults = {**defaults, **cls.block_defaults(block)}
    kwargs = {**defaults, **{k: copy.deepcopy(v) for k, v in cfg.items() if k != 'type'}}
    kwargs['embed_dims'] = embed_dims
    if num_heads is not None and 'num_heads' not in kwargs and _accepts(cls, 'num_heads'):
        kwargs['num_heads'] = num_heads
    return kwargs


def build_mixer(cfg: Cfg, embed_dims: int, num_heads: Optional[int] = None,
                stage: int = 0, block: int = 0) -> nn.Module:
    """A token mixer from its config (see the module docstring)."""
    cls = registered_class(cfg, 'mixer')
    return cls(**mixer_kwargs(cfg, embed_dims, num_heads, stage, block))


def build_shared(cfg: Cfg, embed_dims: int, num_heads: Optional[int] = None,
                 stage: int = 0) -> Optional[tuple[str, nn.Module]]:
    """``(name, module)`` the blocks of a stage with mixer ``cfg`` share, or None."""
    cls = registered_class(cfg, 'mixer')
    if not hasattr(cls, 'build_shared'):
        return None
    return cls.shared_name, cls.build_shared(**mixer_kwargs(cfg, embed_dims, num_heads, stage))


def build_layer(cfg: Cfg, role: str, **filled: Any) -> nn.Module:
    """A registered layer (FFN, patch embedding, stem) from ``cfg`` with the
    arguments the skeleton knows (``filled``) added where the config does
    not set them."""
    cls = registered_class(cfg, role)
    kwargs = {k: copy.deepcopy(v) for k, v in cfg.items() if k != 'type'}
    for key, value in filled.items():
        kwargs.setdefault(key, value)
    return cls(**kwargs)


def build_position(cfg: Optional[Cfg], embed_dims: int, stage: int = 0
                   ) -> tuple[Optional[str], Optional[Cfg]]:
    """``(where, layer config)`` of a position-module config (None: none) in
    stage ``stage``: the module's stage defaults, then the config, with
    ``embed_dims`` filled in."""
    if cfg is None:
        return None, None
    cls = registered_class(cfg, 'position module')
    defaults = cls.stage_defaults(stage) if hasattr(cls, 'stage_defaults') else {}
    cfg = {**defaults, **cfg}
    where = cfg.pop('where', getattr(cls, 'default_where', 'block'))
    if where not in POSITION_PLACES:
        raise ValueError(f'position module {cfg["type"]!r}: where={where!r}, expected one '
                         f'of {POSITION_PLACES}')
    return where, dict(cfg, embed_dims=embed_dims)


def as_stage_list(value: Union[Cfg, None, list, tuple], num_stages: int, name: str) -> list:
    """One entry per stage: a single value is used for every stage, a list
    must have one entry per stage."""
    if isinstance(value, (list, tuple)):
        if len(value) != num_stages:
            raise ValueError(f'{name} has {len(value)} entries but there are {num_stages} '
                             'stages; give one config for all stages or one per stage')
        return list(value)
    return [value] * num_stages

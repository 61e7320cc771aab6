"""The zoo's variants: its settings of the library's token mixers
(:data:`.variant_table.ZOO_VARIANTS`), each put into one macro architecture
(``configs/_base_/backbones/zoo_common.py`` of the project), built as
backbone + FPN neck, and their cost matched to the reference."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .variant_table import ZOO_VARIANTS

#: the project's configs (the variants' fragments and task configs)
CONFIGS = Path(__file__).resolve().parents[1] / 'configs'
#: the library's configs (the demo recipes the task configs build on)
LIBRARY_CONFIGS = Path(__file__).resolve().parents[3] / 'configs'
#: the zoo's macro architecture, which every variant's mixer goes into
COMMON = CONFIGS / '_base_' / 'backbones' / 'zoo_common.py'
#: the variant every other one is matched to
REFERENCE = 'sra'
#: quick mode: tiny widths, one block per stage (mixer widths scaled with them)
QUICK_ARCH = dict(embed_dims=[32, 64, 96, 128], depths=[1, 1, 1, 1], num_heads=[1, 2, 3, 4],
                  mlp_ratios=[2, 2, 2, 2])
FPN_CHANNELS, QUICK_FPN_CHANNELS = 256, 32
#: mixer settings that are widths: they scale with the stage's width
WIDTH_SETTINGS = ('attn_dims', 'modulation_dims', 'head_dims')


def declared_variants() -> dict:
    """``{variant: (mixer type, ZooVariant)}`` of every mixer's entries in
    :data:`ZOO_VARIANTS`, the reference first, then by name."""
    found: dict = {}
    for mixer, entries in ZOO_VARIANTS.items():
        for name, entry in entries.items():
            if name in found:
                raise ValueError(f'zoo variant {name!r} is listed for both {found[name][0]} '
                                 f'and {mixer}')
            found[name] = (mixer, entry)
    return {name: found[name] for name in sorted(found, key=lambda n: (n != REFERENCE, n))}


def variants() -> list[str]:
    """Every zoo variant, the reference first."""
    return list(declared_variants())


def parse_spec(spec: str) -> tuple[str, bool]:
    name, _, mode = spec.partition('@')
    if name not in variants():
        raise ValueError(f'unknown zoo variant {name!r}; choose from {variants()}')
    if mode not in ('', 'quick'):
        raise ValueError(f'bad zoo spec {spec!r}: use <variant> or <variant>@quick')
    return name, mode == 'quick'


def backbone_config(spec: str) -> dict:
    """The backbone config of ``'<variant>'`` or ``'<variant>@quick'``
    (tiny widths, :data:`QUICK_ARCH`)."""
    name, quick = parse_spec(spec)
    cfg = variant_backbone(name, quick)
    cfg.pop('init_cfg', None)
    return cfg


def scale_widths(cfg: dict, arch: dict) -> dict:
    """Backbone config ``cfg`` of the macro architecture with the first
    ``len(arch['depths'])`` stages' mixer settings for widths ``arch``: the
    width settings (:data:`WIDTH_SETTINGS`) scaled by the new width over the
    macro architecture's in each stage."""
    from mmengine.config import Config
    full = Config.fromfile(str(COMMON)).backbone_channels
    n = len(arch['depths'])
    mixer = cfg['mixer']
    stages = mixer[:n] if isinstance(mixer, list) else [mixer] * n
    cfg['mixer'] = [
        {k: max(1, round(v * arch['embed_dims'][i] / full[i]))
         if k in WIDTH_SETTINGS and isinstance(v, int) else v for k, v in stage.items()}
        for i, stage in enumerate(stages)]
    if isinstance(cfg.get('position'), list):
        cfg['position'] = cfg['position'][:n]
    return cfg


def variant_backbone(name: str, quick: bool) -> dict:
    """The macro architecture's backbone config with the mixer (and position
    module) that variant ``name`` declares (``quick``: :data:`QUICK_ARCH`,
    the mixer's widths scaled to it)."""
    from mmengine.config import Config
    mixer, entry = declared_variants()[name]
    cfg = Config.fromfile(str(COMMON)).backbone.to_dict()
    settings = entry.mixer
    cfg['mixer'] = ([dict(type=mixer, **stage) for stage in settings]
                    if isinstance(settings, tuple) else dict(type=mixer, **settings))
    if entry.position is not None:
        cfg['position'] = dict(entry.position)
    if quick:
        cfg['arch'] = dict(QUICK_ARCH)
        scale_widths(cfg, QUICK_ARCH)
    return cfg


def build_zoo_target(spec: str, *, with_cp: bool = False, device: Any = 'cpu',
                     init: bool = True):
    """Backbone + FPN neck of a zoo variant as a :class:`vattn_mm.analysis.Target`
    (the case builder of the speed sweep, :data:`.speed.BUILDER`); ``init=False``: without the
    backbone's weight initialisation (for counting on fake tensors)."""
    import torch
    from mmdet.models.necks import FPN
    from torch import nn

    from vattn_mm.analysis import Target
    from vattn_mm.backbones import TokenPyramid
    from vattn_mm.layers import TokenBlock
    cfg = backbone_config(spec)
    kind = cfg.pop('type')
    if kind != 'TokenPyramid':
        raise ValueError(f'zoo variant {spec!r} must build a TokenPyramid, its fragment '
                         f'says {kind!r}')
    quick = parse_spec(spec)[1]
    with torch.device(device):
        backbone = TokenPyramid(**cfg, with_cp=with_cp)
        if init:
            backbone.init_weights()
        neck = FPN(backbone.out_channels, QUICK_FPN_CHANNELS if quick else FPN_CHANNELS, 5)
        model = nn.ModuleDict(dict(backbone=backbone, neck=neck))
    return Target(spec, model, lambda images: neck(backbone(images)),
                  parts=dict(mixer=[b.attn for b in backbone.modules()
                                    if isinstance(b, TokenBlock) and b.has_mixer]))


def complexity(spec: str, size: int, part: str = '') -> tuple[float, float]:
    """(parameters in M, GMACs) of backbone + FPN (``part='backbone'``: the
    backbone alone) at ``size`` x ``size``: shape-only on fake tensors, or a
    real forward where a mixer picks by value (data-dependent shapes)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vattn_mm.analysis import count_params, model_complexity

    def count() -> tuple[float, float]:
        target = build_zoo_target(spec, init=False)
        cx = model_complexity(target, (size, size))
        if not part:
            return cx.params / 1e6, cx.macs / 1e9
        module = target.model[part]
        return count_params(module) / 1e6, cx.by_module.get(f'ModuleDict.{part}', 0) / 1e9
    try:
        with FakeTensorMode():
            return count()
    except Exception:  # noqa: BLE001  (data-dependent ops cannot run on fake tensors)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return count()


def matching_table(size: int = 224) -> str:
    """Markdown: parameters and GMACs of every variant's backbone at ``size``
    and their difference from the reference's."""
    ref = complexity(REFERENCE, size, 'backbone')
    lines = ['| variant | mixer | params (M) | vs reference | GMACs | vs reference |',
             '|---|---|---|---|---|---|']
    for name in variants():
        params, gmacs = complexity(name, size, 'backbone')
        mixer = backbone_config(name)['mixer']
        kind = (mixer[0] if isinstance(mixer, list) else mixer)['type']
        lines.append(f'| {name} | `{kind}` | {params:.2f} | {params / ref[0] - 1:+.1%} | '
                     f'{gmacs:.3f} | {gmacs / ref[1] - 1:+.1%} |')
    return '\n'.join(lines)


"""The probe study's report: per axis and probe the designs' mean mIoU with
95 % intervals and supported ranks, each probe's discrimination check, the
claims the tests support, the main effects of the position x tokenisation
grid, which claims of a base probe hold on its variants, and three figures
(accuracy against resolution per position encoding, the same for the
position terms of windowed attention beside global attention's, the
mixers' capability chart)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from .probe_study import (AXES, DISCRIMINATION_PAIRS, POSITION_ENCODINGS, TOKENISERS,
                          TRIVIAL_FOREGROUND_IOU, WINDOW_DESIGNS, ProbeRun, axis_probes,
                          is_trivial)
from .probes import PROBES, get_probe, variants_of
from .ranking import (HELD, NOT_RUN, claim_fate, discriminates, estimate, supported_claims,
                      supported_effects, supported_ranks)

PROBES_BEGIN, PROBES_END = '<!-- zoo:probes -->', '<!-- /zoo:probes -->'


def ranked_side(probe: str) -> str:
    """The side a probe ranks by: its largest evaluated side (for
    ``resolution`` the transfer to 4x the pixels)."""
    return str(get_probe(probe).eval_sides[-1])


def seed_scores(runs: Sequence[ProbeRun], probe: str, side: str | None = None,
                axis: str | None = None) -> dict:
    """``{design: [mIoU per finished seed]}`` of one probe at ``side``
    (default :func:`ranked_side`), designs (of ``axis`` only, if given) in
    the order of the runs."""
    side = side or ranked_side(probe)
    out: dict = {}
    for r in runs:
        if (r.probe == probe and not r.error and side in r.scores
                and (axis is None or r.design.startswith(axis + ':'))):
            out.setdefault(r.design, []).append(r.scores[side])
    return out


def _short(design: str) -> str:
    return design.partition(':')[2]


def _cell(values: Sequence[float]) -> str:
    if not values:
        return '-'
    e = estimate(values)
    return (f'{e.mean:.3f} ± {e.half:.3f}' if e.n > 1 else f'{e.mean:.3f}') + f' ({e.n})'


def discrimination_lines(runs: Sequence[ProbeRun]) -> list[str]:
    lines = ['| probe | what it isolates | known pair | their mIoU | separated (95 % '
             'intervals disjoint) |', '|---|---|---|---|---|']
    for base, pairs in DISCRIMINATION_PAIRS.items():
        for probe in (base, *variants_of(base)):
            scores = seed_scores(runs, probe)
            for a, b in pairs:
                if a not in scores or b not in scores:
                    continue
                ok = discriminates(scores[a], scores[b])
                lines.append(f'| {probe} | {PROBES[probe].summary} | {a} / {b} | '
                             f'{_cell(scores[a])} / {_cell(scores[b])} | '
                             f'{"yes" if ok else "**no**"} |')
    return lines


def _trivial_runs(runs: Sequence[ProbeRun], design: str, probe: str) -> int:
    return sum(is_trivial(r) for r in runs if r.design == design and r.probe == probe)


def mixer_table(runs: Sequence[ProbeRun]) -> list[str]:
    """Mixer axis: one row per design, per probe mean ± 95 % half-interval
    (seeds) and the supported rank; no lines where no mixer design scored."""
    designs = list(dict.fromkeys(r.design for r in runs if r.design.startswith('mixer:')))
    scores = {p: seed_scores(runs, p) for p in axis_probes('mixer')}
    probes = [p for p in axis_probes('mixer') if set(scores[p]) & set(designs)]
    if not probes:
        return []
    ranks = {p: supported_ranks(scores[p]) for p in probes}
    head = ' | '.join(f'{p} (rank)' for p in probes)
    lines = [f'| mixer | params | {head} |', '|---' * (2 + len(probes)) + '|']
    for d in designs:
        params = next((r.params for r in runs if r.design == d and r.params), 0)
        cells = []
        for p in probes:
            values = scores[p].get(d, [])
            flag = _trivial_runs(runs, d, p)
            cells.append(f'{_cell(values)} {ranks[p].get(d, "-")}'
                         + (f' ⚠{flag} trivial' if flag else ''))
        lines.append(f'| {_short(d)} | {params / 1e3:.0f}k | ' + ' | '.join(cells) + ' |')
    return lines


def position_table(runs: Sequence[ProbeRun], probe: str = 'resolution') -> list[str]:
    """Position axis on ``probe``: per encoding x tokeniser the mIoU at the
    training side and at 4x the pixels (ranked)."""
    first, last = (str(s) for s in (get_probe(probe).eval_sides[0],
                                    get_probe(probe).eval_sides[-1]))
    at_first, grid = seed_scores(runs, probe, first), seed_scores(runs, probe, last, 'position')
    if not grid:
        return []
    ranks = supported_ranks(grid)
    tokenisers = [t for t in TOKENISERS if any(d.endswith('+' + t) for d in grid)]
    lines = [f'mIoU at {first} px (trained) -> at {last} px, mean ± 95 % half-interval '
             f'(seeds), [supported rank at {last} px among all {len(grid)} pairs]:', '',
             '| position | ' + ' | '.join(tokenisers) + ' |', '|---' * (1 + len(tokenisers)) + '|']
    for pos in POSITION_ENCODINGS:
        cells = []
        for t in tokenisers:
            d = f'position:{pos}+{t}'
            if d not in grid:
                cells.append('-')
                continue
            e1 = estimate(at_first[d]) if at_first.get(d) else None
            flag = _trivial_runs(runs, d, probe)
            cell = f'{e1.mean:.3f} -> {_cell(grid[d])} [{ranks[d]}]' if e1 else '-'
            cells.append(cell + (f' ⚠{flag} trivial' if flag else ''))
        if any(c != '-' for c in cells):
            lines.append(f'| {pos} | ' + ' | '.join(cells) + ' |')
    return lines


def window_table(runs: Sequence[ProbeRun], probe: str = 'resolution') -> list[str]:
    """Window axis on ``probe``: per design the mIoU at every evaluated side,
    the supported rank among the window designs at the last."""
    sides = [str(s) for s in get_probe(probe).eval_sides]
    per_side = {s: seed_scores(runs, probe, s, 'window') for s in sides}
    if not per_side[sides[-1]]:
        return []
    ranks = supported_ranks(per_side[sides[-1]])
    lines = [f'| attention | position term | {sides[0]} px (trained) | '
             + ' | '.join(f'{s} px' for s in sides[1:-1]) + f' | {sides[-1]} px (rank) |',
             '|---' * (2 + len(sides)) + '|']
    for name in WINDOW_DESIGNS:
        d = f'window:{name}'
        if d not in per_side[sides[-1]]:
            continue
        attention, _, term = name.partition('+')
        flag = _trivial_runs(runs, d, probe)
        cells = [_cell(per_side[s].get(d, [])) for s in sides]
        lines.append(f'| {attention} | {term} | ' + ' | '.join(cells[:-1]) + f' | {cells[-1]} '
                     f'{ranks[d]}' + (f' ⚠{flag} trivial' if flag else '') + ' |')
    return lines


def grid_effects(runs: Sequence[ProbeRun], probe: str = 'resolution') -> dict:
    """``{factor: (levels, supported effects)}`` of the position x
    tokenisation grid on ``probe`` at its ranked side: per factor the level
    pairs whose cell means differ consistently over the other factor's
    levels (paired t-tests, Holm over the factor's pairs)."""
    grid = {tuple(_short(d).split('+')): sum(v) / len(v)
            for d, v in seed_scores(runs, probe, axis='position').items() if v}
    out = {}
    for factor, index in (('position encoding', 0), ('tokenisation', 1)):
        cells: dict = {}
        for key, mean in grid.items():
            cells.setdefault(key[index], {})[key[1 - index]] = mean
        if len(cells) < 2 or max(len(c) for c in cells.values()) < 2:
            continue
        out[factor] = (list(cells), supported_effects(cells))
    return out


def effect_lines(runs: Sequence[ProbeRun], probe: str = 'resolution') -> list[str]:
    """The supported main effects of :func:`grid_effects`, one line a factor."""
    lines = []
    for factor, (cells, effects) in grid_effects(runs, probe).items():
        pairs = len(cells) * (len(cells) - 1) // 2
        shown = ', '.join(f'{e.better} > {e.worse} (+{e.diff:.3f} ± {e.half:.3f}, in {e.wins} '
                          f'of {e.n})' for e in effects)
        lines.append(f'* **{factor}** ({len(cells)} levels, paired over the other factor): '
                     f'{len(effects)} of {pairs} pairs separated' + (f': {shown}.' if effects
                                                                     else '.'))
    return lines


def _fates(claims: Sequence, variants: dict) -> tuple[list, list, list]:
    """Claims of a base geometry sorted by their fate on ``variants``
    (``{variant: (supported claims there, what ran there)}``): held on every
    variant that ran both sides (and on one at least), lost on some
    (``(claim, [(variant, fate)])``), run on none."""
    held, lost, untested = [], [], []
    for c in claims:
        fates = {v: claim_fate(c.better, c.worse, sup, ran) for v, (sup, ran) in variants.items()}
        if all(f == NOT_RUN for f in fates.values()):
            untested.append(c)
        elif all(f in (HELD, NOT_RUN) for f in fates.values()):
            held.append(c)
        else:
            lost.append((c, [(v, f) for v, f in fates.items() if f not in (HELD, NOT_RUN)]))
    return held, lost, untested


def _fate_line(title: str, claims: Sequence, held: list, lost: list, untested: list,
               short=_short, limit: int = 12) -> str:
    def name(c) -> str:
        return f'{short(c.better)} > {short(c.worse)}'
    shown = ', '.join(name(c) for c in held[:limit])
    more = f' and {len(held) - limit} more' if len(held) > limit else ''
    text = (f'* **{title}**: of {len(claims)} claims, {len(held)} held on every variant that '
            f'ran both' + (f': {shown}{more}' if held else ''))
    if lost:
        text += f'; {len(lost)} did not: ' + ', '.join(
            f'{name(c)} ({"; ".join(f"{v}: {f}" for v, f in fates)})' for c, fates in lost[:limit])
        text += f' and {len(lost) - limit} more' if len(lost) > limit else ''
    return text + (f'; {len(untested)} not run on a variant.' if untested else '.')


def robustness_lines(runs: Sequence[ProbeRun]) -> list[str]:
    """Per base probe and axis with variant runs: which of the base
    geometry's supported claims (and, for the position grid, main effects)
    held on every variant that ran both designs (levels), and which not."""
    lines = []
    for axis, bases in AXES.items():
        for base in bases:
            scores = {v: seed_scores(runs, v, axis=axis) for v in variants_of(base)}
            variants = {v: (supported_claims(sc), list(sc)) for v, sc in scores.items()
                        if len(sc) >= 2}
            base_scores = seed_scores(runs, base, axis=axis)
            if not variants or len(base_scores) < 2:
                continue
            pairs = [(a, b) for a, b in DISCRIMINATION_PAIRS.get(base, ())
                     if a.startswith(axis + ':')]
            blind = {v for v in variants if any(
                a in scores[v] and b in scores[v] and not discriminates(scores[v][a], scores[v][b])
                for a, b in pairs)}
            names = ', '.join(v + (' [its known pair not separated]' if v in blind else '')
                              for v in variants)
            claims = supported_claims(base_scores)
            lines.append(_fate_line(f'{base}, {axis} axis (on {names})', claims,
                                    *_fates(claims, variants)))
            if axis != 'position':
                continue
            on_variants = {v: grid_effects(runs, v) for v in variants}
            for factor, (_, effects) in grid_effects(runs, base).items():
                found = {v: (g[factor][1], g[factor][0]) for v, g in on_variants.items()
                         if factor in g}
                if found:
                    lines.append(_fate_line(f'{base}, {factor} main effect', effects,
                                            *_fates(effects, found), short=str))
    return lines


def claim_lines(runs: Sequence[ProbeRun], limit: int = 12) -> list[str]:
    lines = []
    for probe in PROBES:
        for axis in AXES:
            scores = seed_scores(runs, probe, axis=axis)
            if len(scores) < 2:
                continue
            claims = supported_claims(scores)
            pairs = len(scores) * (len(scores) - 1) // 2
            shown = ', '.join(f'{_short(c.better)} > {_short(c.worse)} (+{c.diff:.3f})'
                              for c in claims[:limit])
            more = f' and {len(claims) - limit} more' if len(claims) > limit else ''
            lines.append(f'* **{probe}**, {axis} axis: {len(claims)} of {pairs} pairs '
                         f'separated' + (f': {shown}{more}.' if claims else '.'))
    return lines


def _per_probe(runs: Sequence[ProbeRun], axis: str,
               lines_of: Callable[[Sequence[ProbeRun], str], list[str]],
               title: Callable[[str], str]) -> list[str]:
    """Per probe of ``axis`` whose ``lines_of(runs, probe)`` has lines: its
    ``title(probe)`` and those lines."""
    parts = []
    for probe in axis_probes(axis):
        lines = lines_of(runs, probe)
        if lines:
            parts += [title(probe), '', *lines, '']
    return parts


def probe_report(runs: Sequence[ProbeRun], how: str) -> str:
    """The markdown of the study: set-up, discrimination, tables, claims,
    main effects."""
    errors = [r for r in runs if r.error]
    trivial = [r for r in runs if is_trivial(r)]
    parts = [f'Set-up: {how}.', '', '**Discrimination.**', '', *discrimination_lines(runs), '']
    mixers = mixer_table(runs)
    if mixers:
        parts += ['**Token mixers** (the rest fixed), mIoU at the ranked side, mean ± 95 % '
                  'half-interval (seeds), then the supported rank (1 + the designs a '
                  'Holm-corrected Welch test puts above it; equal ranks: not separated):', '',
                  *mixers, '']
    parts += _per_probe(runs, 'position', position_table, lambda probe: (
        f'**Position encoding x tokenisation** (global attention, MLP FFN), resolution '
        f'transfer on {probe}:'))
    parts += _per_probe(runs, 'window', window_table, lambda probe: (
        f'**Position terms in windowed and pooling attention** (MLP FFN, overlapping patches), '
        f'resolution transfer on {probe}: mIoU, mean ± 95 % half-interval (seeds), the '
        f'supported rank among these designs at the largest side:'))
    parts += ['**Supported differences** (Holm-corrected Welch tests, family-wise 5 % per '
              'probe and axis):', '', *claim_lines(runs), '']
    parts += _per_probe(runs, 'position', effect_lines, lambda probe: (
        f'**Main effects** of the position x tokenisation grid on {probe} at '
        f'{ranked_side(probe)} px (per factor, paired t-tests of cell means over the other '
        f'factor\'s levels, Holm over the factor\'s pairs, family-wise 5 %; difference ± 95 % '
        f'half-interval):'))
    robust = robustness_lines(runs)
    if robust:
        parts += ['**Across geometries and schedules** (each base probe\'s supported claims, '
                  'tested again on its variants with the designs each ran; a claim holds where '
                  'the variant\'s own Holm-corrected tests support it too):', '', *robust, '']
    parts += [f'Runs: {len(runs)}; failed: {len(errors)}; trivial (foreground IoU <= '
              f'{TRIVIAL_FOREGROUND_IOU}): {len(trivial)}.']
    for r in errors:
        parts.append(f'* {r.design} {r.probe} seed {r.seed}: {r.error}')
    return '\n'.join(parts)


def _transfer_panel(ax, probe, per_side: dict, lines: Sequence[tuple[str, dict]],
                    title: str) -> None:
    """On ``ax``, mIoU against test pixels / training pixels of ``probe``
    for each ``(design, errorbar settings)`` of ``lines`` that scored at
    every side (``per_side``: ``{side: seed_scores}``)."""
    sides = [str(s) for s in probe.eval_sides]
    ratio = [(int(s) / probe.train_side) ** 2 for s in sides]
    for d, style in lines:
        ests = [estimate(per_side[s][d]) if per_side[s].get(d) else None for s in sides]
        if all(ests):
            ax.errorbar(ratio, [e.mean for e in ests],
                        yerr=[e.half if e.n > 1 else 0 for e in ests], **style)
    ax.set_xscale('log', base=2)
    ax.set_xticks(ratio, [f'{r:.1f}x' for r in ratio])
    ax.set_title(title)
    ax.set_xlabel(f'test pixels / training pixels ({probe.train_side}² px)')


#: the global-attention designs drawn beside the window designs
GLOBAL_REFERENCES = tuple(f'position:{p}+overlap' for p in ('none', 'absolute', 'cpe', 'convffn'))


def _plot_window(runs: Sequence[ProbeRun], path: Path):
    """mIoU against test pixels of the window designs (solid) and of global
    attention with the same tokeniser (dashed), one panel per probe of the
    window axis; None without window runs."""
    import matplotlib.pyplot as plt
    probes = [p for p in axis_probes('window')
              if any(d.startswith('window:') for d in seed_scores(runs, p))]
    if not probes:
        return None
    fig, axes = plt.subplots(1, len(probes), figsize=(4.6 * len(probes) + 1.6, 4), sharey=True,
                             squeeze=False)
    colours = plt.get_cmap('tab20').colors
    lines = [(d, dict(marker='o', capsize=2, color=colours[i % len(colours)],
                      linestyle='--' if d.startswith('position:') else '-',
                      label=_short(d) if d.startswith('window:')
                      else 'global+' + _short(d).split('+')[0]))
             for i, d in enumerate((*(f'window:{w}' for w in WINDOW_DESIGNS), *GLOBAL_REFERENCES))]
    for ax, name in zip(axes[0], probes):
        probe = get_probe(name)
        per_side = {str(s): seed_scores(runs, name, str(s)) for s in probe.eval_sides}
        _transfer_panel(ax, probe, per_side, lines, name)
    axes[0][0].set_ylabel('mIoU (mean, 95 % interval)')
    axes[0][-1].legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_probes(runs: Sequence[ProbeRun], out: Path) -> list[Path]:
    """``zoo_resolution.png`` (mIoU against test pixels per position
    encoding, one panel per tokeniser), ``zoo_window.png`` (the same for the
    window designs beside global attention's, one panel per probe) and
    ``zoo_capability.png`` (each mixer's probe scores side by side); the
    figures that had data."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    written = []
    probe = get_probe('resolution')
    sides = [str(s) for s in probe.eval_sides]
    per_side = {s: seed_scores(runs, 'resolution', s) for s in sides}
    tokenisers = [t for t in TOKENISERS if any(d.startswith('position:') and d.endswith('+' + t)
                                               for d in per_side[sides[0]])]
    if tokenisers:
        fig, axes = plt.subplots(1, len(tokenisers), figsize=(4 * len(tokenisers), 3.6),
                                 sharey=True, squeeze=False)
        for ax, tok in zip(axes[0], tokenisers):
            _transfer_panel(ax, probe, per_side,
                            [(f'position:{pos}+{tok}', dict(label=pos, marker='o', capsize=2))
                             for pos in POSITION_ENCODINGS], f'tokeniser: {tok}')
        axes[0][0].set_ylabel('mIoU (mean, 95 % interval)')
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        written.append(out / 'zoo_resolution.png')
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    window = _plot_window(runs, out / 'zoo_window.png')
    written += [window] if window else []
    mixers = list(dict.fromkeys(r.design for r in runs if r.design.startswith('mixer:')))
    probes = [p for p in axis_probes('mixer') if any(seed_scores(runs, p).get(d) for d in mixers)]
    if mixers and probes:
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(mixers) * len(probes) / 2), 3.8))
        width = 0.8 / len(probes)
        for i, p in enumerate(probes):
            scores = seed_scores(runs, p)
            ests = [estimate(scores[d]) if scores.get(d) else None for d in mixers]
            ax.bar([j + i * width for j in range(len(mixers))],
                   [e.mean if e else 0 for e in ests], width,
                   yerr=[e.half if e and e.n > 1 else 0 for e in ests], capsize=1.5,
                   label=f'{p} ({ranked_side(p)} px)')
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(mixers))],
                      [_short(d) for d in mixers], rotation=45, ha='right')
        ax.set_ylabel('mIoU (mean, 95 % interval)')
        ax.legend(fontsize=7, ncol=len(probes))
        fig.tight_layout()
        written.append(out / 'zoo_capability.png')
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    return written

"""The probe study's report: per axis and probe the designs' mean mIoU with
95 % intervals and supported ranks, each probe's discrimination check, the
claims the tests support, the main effects of the position x tokenisation
grid, and two figures (accuracy against resolution per
position encoding, the mixers' capability chart)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .probe_study import (AXES, DISCRIMINATION_PAIRS, POSITION_ENCODINGS, TOKENISERS,
                          TRIVIAL_FOREGROUND_IOU, ProbeRun, is_trivial)
from .probes import PROBES, get_probe
from .ranking import (discriminates, estimate, supported_claims, supported_effects,
                      supported_ranks)

PROBES_BEGIN, PROBES_END = '<!-- zoo:probes -->', '<!-- /zoo:probes -->'


def ranked_side(probe: str) -> str:
    """The side a probe ranks by: its largest evaluated side (for
    ``resolution`` the transfer to 4x the pixels)."""
    return str(get_probe(probe).eval_sides[-1])


def seed_scores(runs: Sequence[ProbeRun], probe: str, side: str | None = None) -> dict:
    """``{design: [mIoU per finished seed]}`` of one probe at ``side``
    (default :func:`ranked_side`), designs in the order of the runs."""
    side = side or ranked_side(probe)
    out: dict = {}
    for r in runs:
        if r.probe == probe and not r.error and side in r.scores:
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
    for probe, (a, b) in DISCRIMINATION_PAIRS.items():
        scores = seed_scores(runs, probe)
        if a not in scores or b not in scores:
            continue
        ok = discriminates(scores[a], scores[b])
        lines.append(f'| {probe} | {PROBES[probe].summary} | {_short(a)} / {_short(b)} | '
                     f'{_cell(scores[a])} / {_cell(scores[b])} | {"yes" if ok else "**no**"} |')
    return lines


def _trivial_runs(runs: Sequence[ProbeRun], design: str, probe: str) -> int:
    return sum(is_trivial(r) for r in runs if r.design == design and r.probe == probe)


def mixer_table(runs: Sequence[ProbeRun]) -> list[str]:
    """Mixer axis: one row per design, per probe mean ± 95 % half-interval
    (seeds) and the supported rank; no lines where no mixer design scored."""
    designs = list(dict.fromkeys(r.design for r in runs if r.design.startswith('mixer:')))
    scores = {p: seed_scores(runs, p) for p in AXES['mixer']}
    probes = [p for p in AXES['mixer'] if set(scores[p]) & set(designs)]
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


def position_table(runs: Sequence[ProbeRun]) -> list[str]:
    """Position axis on ``resolution``: per encoding x tokeniser the mIoU at
    the training side and at 4x the pixels (ranked)."""
    probe = 'resolution'
    first, last = (str(s) for s in (get_probe(probe).eval_sides[0],
                                    get_probe(probe).eval_sides[-1]))
    at_first, at_last = seed_scores(runs, probe, first), seed_scores(runs, probe, last)
    grid = {d: v for d, v in at_last.items() if d.startswith('position:')}
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


def effect_lines(runs: Sequence[ProbeRun]) -> list[str]:
    """Main effects of the position x tokenisation grid on ``resolution`` at
    its ranked side: per factor, the level pairs whose cell means differ
    consistently over the other factor's levels (paired t-tests, Holm over
    the factor's pairs)."""
    grid = {tuple(_short(d).split('+')): sum(v) / len(v)
            for d, v in seed_scores(runs, 'resolution').items() if d.startswith('position:') and v}
    lines = []
    for factor, index in (('position encoding', 0), ('tokenisation', 1)):
        cells: dict = {}
        for key, mean in grid.items():
            cells.setdefault(key[index], {})[key[1 - index]] = mean
        if len(cells) < 2 or max(len(c) for c in cells.values()) < 2:
            continue
        effects = supported_effects(cells)
        pairs = len(cells) * (len(cells) - 1) // 2
        shown = ', '.join(f'{e.better} > {e.worse} (+{e.diff:.3f} ± {e.half:.3f}, in {e.wins} '
                          f'of {e.n})' for e in effects)
        lines.append(f'* **{factor}** ({len(cells)} levels, paired over the other factor): '
                     f'{len(effects)} of {pairs} pairs separated' + (f': {shown}.' if effects
                                                                     else '.'))
    return lines


def claim_lines(runs: Sequence[ProbeRun], limit: int = 12) -> list[str]:
    lines = []
    for probe in PROBES:
        for axis in AXES:
            scores = {d: v for d, v in seed_scores(runs, probe).items()
                      if d.startswith(axis + ':')}
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


def probe_report(runs: Sequence[ProbeRun], how: str) -> str:
    """The markdown of the study: set-up, discrimination, tables, claims,
    main effects."""
    errors = [r for r in runs if r.error]
    trivial = [r for r in runs if is_trivial(r)]
    parts = [f'Set-up: {how}.', '', '**Discrimination.**', '', *discrimination_lines(runs), '']
    mixers, positions = mixer_table(runs), position_table(runs)
    if mixers:
        parts += ['**Token mixers** (the rest fixed), mIoU at the ranked side, mean ± 95 % '
                  'half-interval (seeds), then the supported rank (1 + the designs a '
                  'Holm-corrected Welch test puts above it; equal ranks: not separated):', '',
                  *mixers, '']
    if positions:
        parts += ['**Position encoding x tokenisation** (global attention, MLP FFN), '
                  'resolution transfer:', '', *positions, '']
    parts += ['**Supported differences** (Holm-corrected Welch tests, family-wise 5 % per '
              'probe and axis):', '', *claim_lines(runs), '']
    effects = effect_lines(runs)
    if effects:
        parts += [f'**Main effects** of the position x tokenisation grid on resolution at '
                  f'{ranked_side("resolution")} px (per factor, paired t-tests of cell means over '
                  f'the other factor\'s levels, Holm over the factor\'s pairs, family-wise 5 %; '
                  f'difference ± 95 % half-interval):', '', *effects, '']
    parts += [f'Runs: {len(runs)}; failed: {len(errors)}; trivial (foreground IoU <= '
              f'{TRIVIAL_FOREGROUND_IOU}): {len(trivial)}.']
    for r in errors:
        parts.append(f'* {r.design} {r.probe} seed {r.seed}: {r.error}')
    return '\n'.join(parts)


def plot_probes(runs: Sequence[ProbeRun], out: Path) -> list[Path]:
    """``zoo_resolution.png`` (mIoU against test pixels per position
    encoding, one panel per tokeniser) and ``zoo_capability.png`` (each
    mixer's probe scores side by side); the figures that had data."""
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
        ratio = [(int(s) / probe.train_side) ** 2 for s in sides]
        for ax, tok in zip(axes[0], tokenisers):
            for pos in POSITION_ENCODINGS:
                d = f'position:{pos}+{tok}'
                ests = [estimate(per_side[s][d]) if per_side[s].get(d) else None for s in sides]
                if all(ests):
                    ax.errorbar(ratio, [e.mean for e in ests],
                                yerr=[e.half if e.n > 1 else 0 for e in ests], label=pos,
                                marker='o', capsize=2)
            ax.set_xscale('log', base=2)
            ax.set_xticks(ratio, [f'{r:.1f}x' for r in ratio])
            ax.set_title(f'tokeniser: {tok}')
            ax.set_xlabel(f'test pixels / training pixels ({probe.train_side}² px)')
        axes[0][0].set_ylabel('mIoU (mean, 95 % interval)')
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        written.append(out / 'zoo_resolution.png')
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)
    mixers = list(dict.fromkeys(r.design for r in runs if r.design.startswith('mixer:')))
    probes = [p for p in AXES['mixer'] if any(seed_scores(runs, p).get(d) for d in mixers)]
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

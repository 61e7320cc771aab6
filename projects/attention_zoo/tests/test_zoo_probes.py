"""The zoo's probe study: the probes' labels mean what they say, the metric,
the ranking protocol, the designs, one training run and the report
(projects/attention_zoo/attention_zoo/probes.py, probe_study.py, ranking.py,
probe_report.py; the tool end to end: projects/attention_zoo/tests/test_zoo_tool.py)."""
import math

import numpy as np
import pytest

from attention_zoo.probe_report import plot_probes, probe_report, seed_scores
from attention_zoo.probe_study import (SCALES, ProbeRun, Scale, design_backbone,
                                               designs, is_trivial, merge_runs, probe_steps,
                                               run_probe)
from attention_zoo.probes import (ARC_MARK, CUE_BAND, CUE_COLOURS, LONG_RANGE_GAP,
                                          MARK_LENGTH, PROBES, confusion, get_probe, mean_iou,
                                          trivial_miou)
from attention_zoo.ranking import (discriminates, estimate, holm, paired_p,
                                           supported_claims, supported_effects,
                                           supported_ranks, welch_p)


# ------------------------------------------------------------------ probes
@pytest.mark.parametrize('name', list(PROBES))
def test_probe_draws_are_seeded_and_labelled(name):
    probe = get_probe(name)
    x, y = probe.sample(3, 4)
    assert x.shape == (4, 3, probe.train_side, probe.train_side) and x.dtype == np.float32
    assert y.shape == (4, probe.train_side, probe.train_side) and y.dtype == np.int64
    assert np.isfinite(x).all() and 0 <= y.min() and y.max() < probe.num_classes
    again = probe.sample(3, 4)
    assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
    assert not np.array_equal(x, probe.sample(4, 4)[0])
    assert not np.array_equal(x, probe.sample(3, 4, split='eval')[0])
    for side in probe.eval_sides:
        assert probe.sample(0, 1, side, split='eval')[1].shape == (1, side, side)
    assert (y > 0).any(axis=(1, 2)).all()            # every image has objects


def test_probe_refusals():
    with pytest.raises(ValueError, match='unknown probe'):
        get_probe('nope')
    with pytest.raises(ValueError, match='below 32'):
        get_probe('resolution').sample(0, 1, 16)
    with pytest.raises(ValueError, match='split'):
        get_probe('resolution').sample(0, 1, split='test')
    with pytest.raises(ValueError, match='long_range needs a side'):
        get_probe('long_range').sample(0, 1, 64)


@pytest.mark.parametrize('name, min_gap', [('long_range', LONG_RANGE_GAP),
                                           ('long_range_far', 80)])
def test_long_range_label_is_the_far_cue(name, min_gap):
    """Every object pixel's class is 1 + the index of the cue band's colour,
    and no object pixel lies within the probe's gap of the band."""
    probe = get_probe(name)
    x, y = probe.sample(0, 24)
    side = probe.train_side
    for image, label in zip(x, y):
        hits = [k for k, c in enumerate(CUE_COLOURS)
                if np.all(np.abs(image - c[:, None, None]) < 1e-6, 0).sum() == side * CUE_BAND]
        assert len(hits) == 1                        # one band, CUE_BAND columns wide
        band = np.argwhere(np.all(np.abs(image - CUE_COLOURS[hits[0]][:, None, None]) < 1e-6, 0))
        assert set(np.unique(band[:, 1])) in ({*range(CUE_BAND)},
                                              {*range(side - CUE_BAND, side)})
        assert set(np.unique(label[label > 0])) == {1 + hits[0]}
        columns = np.argwhere(label > 0)[:, 1]
        gap = np.abs(columns[:, None] - np.unique(band[:, 1])[None]).min()
        assert gap >= min_gap
        # the objects' own pixels do not tell the class: one grey level each
        rgb = image[:, label > 0]
        assert np.allclose(rgb[0], rgb[1]) and np.allclose(rgb[1], rgb[2])


@pytest.mark.parametrize('name', ['resolution', 'resolution_small', 'resolution_large'])
def test_resolution_keeps_pixel_size_and_density(name):
    """At 4x the pixels the objects keep their pixel size (density constant):
    the foreground fraction is about the same, the object count ~4x."""
    probe = get_probe(name)
    small = probe.sample(0, 64, 64, split='eval')[1]
    large = probe.sample(0, 64, 128, split='eval')[1]
    frac = [(y > 0).mean() for y in (small, large)]
    assert 0.7 < frac[1] / frac[0] < 1.4


def test_variants_ask_their_base_question_again():
    """Each base probe has a variant; a variant keeps its base's classes and
    changes the geometry (drawing or sides) or the schedule as it says."""
    from attention_zoo.probes import variants_of
    bases = [p for p in PROBES.values() if not p.varies]
    assert all(variants_of(p.name) for p in bases)
    for v in (p for p in PROBES.values() if p.varies):
        base = get_probe(v.varies)
        assert v.classes == base.classes and v.name.startswith(base.name + '_')
        assert (v.draw, v.train_side, v.schedule) != (base.draw, base.train_side, base.schedule)
    assert get_probe('scale_range_large').train_side == 160
    assert probe_steps(get_probe('long_range_long'), SCALES['cpu']) == 1200
    # smaller (larger) shapes: their connected pieces are less than half (over 1.5x) as large
    from scipy import ndimage
    sizes = []
    for name in ('resolution', 'resolution_small', 'resolution_large'):
        pieces = [np.bincount(ndimage.label(y > 0)[0].ravel())[1:]
                  for y in get_probe(name).sample(0, 32)[1]]
        sizes.append(np.concatenate(pieces).mean())
    assert sizes[1] < 0.5 * sizes[0] and sizes[2] > 1.5 * sizes[0]


def _marked_objects(name: str, n: int):
    """Per image of probe ``name``: its class and whether its labelled
    pixels are grey but for a mark in that class's cue colour inside them."""
    probe = get_probe(name)
    x, y = probe.sample(0, n)
    for image, label in zip(x, y):
        classes = np.unique(label[label > 0])
        assert len(classes) == 1                     # one object (one class) an image
        cls = int(classes[0])
        mark = np.all(np.abs(image - CUE_COLOURS[cls - 1][:, None, None]) < 1e-6, 0)
        grey = np.isclose(image[0], image[1]) & np.isclose(image[1], image[2])
        obj = label == cls
        assert mark.any() and not (mark & ~obj).any() and (grey | mark)[obj].all()
        yield label, obj, mark


def test_scale_range_class_is_the_colour_of_one_end():
    """One bar an image, from a few pixels to most of the image long; its
    class is the colour of MARK_LENGTH of it at one end, its other pixels
    are grey (they do not tell the class); a long bar's other end lies most
    of the image away from the mark."""
    side = get_probe('scale_range').train_side
    areas, reaches = [], []
    for _, obj, mark in _marked_objects('scale_range', 96):
        areas.append(obj.sum())
        if obj.sum() >= 200:
            assert abs(mark.sum() / obj.sum() - MARK_LENGTH) < 0.05
            pixels, marks = np.argwhere(obj), np.argwhere(mark)
            reaches.append(max(np.sqrt(((marks - p) ** 2).sum(1)).min() for p in pixels[::5]))
    assert min(areas) <= 12 and max(areas) >= 0.1 * side ** 2
    assert max(reaches) >= 0.6 * side and np.median(reaches) >= 0.25 * side


def test_scale_range_lengths_are_uniform():
    """Bar lengths are uniform from 4 px to 90 % of the side: long bars are
    as frequent as short ones (log-uniform lengths put a few long bars'
    pixels in most of the images' foreground)."""
    probe = get_probe('scale_range')
    side = probe.train_side
    lengths = []
    for y in probe.sample(0, 400)[1]:
        pixels = np.argwhere(y > 0).astype(float)
        pixels -= pixels.mean(0)
        axis = np.linalg.eigh(pixels.T @ pixels)[1][:, -1]      # the bar's long axis
        lengths.append(np.ptp(pixels @ axis) + 1)
    quartiles = np.quantile(lengths, [0.25, 0.5, 0.75])
    expected = 4 + (0.9 * side - 4) * np.array([0.25, 0.5, 0.75])
    assert np.abs(quartiles - expected).max() < 8        # log-uniform: a median of 21 px
    assert min(lengths) <= 8 and max(lengths) >= 0.85 * side


@pytest.mark.parametrize('name, reach', [('fine_structure', 2), ('fine_structure_thin', 1)])
def test_fine_structure_is_one_thin_marked_arc(name, reach):
    """One arc an image, thin (an erosion by a square of side 2 * reach + 1
    removes it all: 5 px for the base arcs, 3 px for the thin variant's),
    its class the colour of about ARC_MARK of it; every class occurs."""
    classes, fractions = set(), []
    for label, obj, mark in _marked_objects(name, 24):
        eroded = obj.copy()
        for dy in range(-reach, reach + 1):
            for dx in range(-reach, reach + 1):
                eroded &= np.roll(np.roll(obj, dy, 0), dx, 1)
        assert not eroded.any()
        classes.add(int(label.max()))
        fractions.append(mark.sum() / obj.sum())
    assert classes == {1, 2, 3}
    assert abs(np.median(fractions) - ARC_MARK) < 0.05


# ------------------------------------------------------------------ metric
def test_confusion_and_mean_iou():
    label = np.array([[0, 0, 1, 1]])
    pred = np.array([[0, 1, 1, 1]])
    conf = confusion(pred, label, 3)
    assert conf.tolist() == [[1, 1, 0], [0, 2, 0], [0, 0, 0]]
    assert mean_iou(conf) == pytest.approx((1 / 2 + 2 / 3) / 2)   # class 2 absent: not counted
    assert trivial_miou(np.array([[0, 0, 0, 1]]), 2) == pytest.approx(3 / 4 / 2)
    with pytest.raises(ValueError, match='shape'):
        confusion(pred, label[:, :3], 3)


# ------------------------------------------------------------------ protocol
def test_estimate_is_the_t_interval():
    e = estimate([1., 2., 3.])
    assert e.mean == 2 and e.n == 3
    assert e.half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert math.isinf(estimate([1.]).half)
    with pytest.raises(ValueError):
        estimate([])


def test_ranking_claims_only_supported_differences():
    scores = {'a': [0.90, 0.91, 0.89], 'b': [0.50, 0.52, 0.49], 'c': [0.51, 0.48, 0.50],
              'd': [0.2]}
    claims = supported_claims(scores)
    assert {(c.better, c.worse) for c in claims} == {('a', 'b'), ('a', 'c')}
    assert all(c.p <= 0.05 for c in claims)
    assert supported_ranks(scores) == {'a': 1, 'b': 2, 'c': 2, 'd': 1}   # one seed: no claim
    assert discriminates(scores['a'], scores['b'])
    assert not discriminates(scores['b'], scores['c'])
    assert welch_p([1., 1.], [2., 2.]) == 0 and welch_p([1.], [2., 3.]) == 1


def test_holm_adjusts_step_down():
    """Sorted p-values times the tests left, kept monotone, capped at 1."""
    assert holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.6, 0.7]) == [1.0, 1.0] and holm([]) == []


def test_main_effects_are_paired_over_the_other_factor():
    """A level better in every cell by a little is supported, though the
    cells' spread over the other factor dwarfs the difference; a level
    better in some cells and worse in others is not."""
    rng = np.random.default_rng(0)
    base = {f'p{i}': float(rng.uniform(0.3, 0.9)) for i in range(8)}
    cells = {'stem': {k: v + 0.05 + rng.normal(0, 0.005) for k, v in base.items()},
             'patch': dict(base),
             'mixed': {k: v + (0.05 if i % 2 else -0.05) for i, (k, v) in enumerate(base.items())}}
    effects = supported_effects(cells)
    assert [(e.better, e.worse) for e in effects] == [('stem', 'patch')]
    top = effects[0]
    assert 0.04 < top.diff < 0.06 and top.wins == top.n == 8
    assert 0 < top.half < 0.01 and top.p <= 0.05
    # pooled over the other factor the seeds of 'stem' and 'patch' overlap: Welch claims nothing
    assert supported_claims({k: list(v.values()) for k, v in cells.items()}) == []
    assert paired_p([0.1, 0.1]) == 0 and paired_p([0., 0.]) == 1 and paired_p([0.3]) == 1
    assert supported_effects({'a': {'x': 1.}, 'b': {'x': 0.}}) == []     # one shared level


def test_holm_correction_withholds_marginal_claims():
    """Many designs with the same distribution: no pair is claimed."""
    rng = np.random.default_rng(0)
    scores = {f'd{i}': list(rng.normal(0.5, 0.05, 3)) for i in range(12)}
    assert supported_claims(scores) == []
    assert set(supported_ranks(scores).values()) == {1}


# ------------------------------------------------------------------ designs, runs
def test_designs_of_every_axis():
    assert 'mixer:swin' in designs('mixer') and len(designs('position')) == 32
    assert len(designs('window')) == 9
    swin = design_backbone('mixer:swin', SCALES['cpu'])
    assert len(swin['mixer']) == 2 and swin['arch']['depths'] == [1, 1]
    absolute = design_backbone('position:absolute+overlap', SCALES['cpu'])
    assert [p['grid_size'] for p in absolute['position']] == [16, 8]     # the 64 px grid
    assert absolute['ffn'] == dict(type='MLP')
    assert design_backbone('position:convffn+ceit', SCALES['cpu'])['ffn'] == dict(type='ConvFFN')
    assert design_backbone('position:lepe+overlap', SCALES['cpu'])['mixer']['lepe'] is True
    # windows half the 64 px grid; MViTv2's tables sized for it
    table = design_backbone('window:swin_fixed+table', SCALES['cpu'])
    assert [(m['window_size'], m['position_bias']) for m in table['mixer']] == [(8, 'table'),
                                                                                (4, 'table')]
    cpe = design_backbone('window:swin+cpe', SCALES['cpu'])
    assert cpe['position'] == dict(type='ConvPosEnc') and cpe['mixer'][0]['position_bias'] == 'none'
    mvit = design_backbone('window:mvit+decomposed', SCALES['cpu'])['mixer']
    assert [(m['input_size'], m['stride_kv'], m['rel_pos']) for m in mvit] == [(16, 4, True),
                                                                               (8, 2, True)]
    for bad, match in (('mixer:nope', 'unknown zoo variant'), ('pos:x', 'bad design'),
                       ('position:none+nope', 'unknown tokeniser'),
                       ('position:nope+overlap', 'unknown position'),
                       ('window:swin+rope', 'unknown window design')):
        with pytest.raises(ValueError, match=match):
            design_backbone(bad, SCALES['cpu'])
    with pytest.raises(ValueError, match='unknown position encodings'):
        designs('position', positions=['nope'])


def test_growing_windows_at_a_new_side():
    """``window:swin+...`` evaluates a copy whose windows grow with the side
    (8 / 4 at 64 px -> 16 / 8 at 128, 11 / 6 at 88); ``swin_fixed`` and the
    trained network keep theirs."""
    import torch

    from attention_zoo.probe_study import build_probe_net, model_at_side
    from vattn_mm.layers import ShiftedWindowAttention

    def windows(net):
        return [m.window_size for m in net.modules() if isinstance(m, ShiftedWindowAttention)]
    torch.manual_seed(0)
    for design, grown in (('window:swin+table', [[8, 4], [11, 6], [16, 8]]),
                          ('window:swin_fixed+table', [[8, 4]] * 3)):
        net = build_probe_net(design_backbone(design, SCALES['cpu']), 4, 8).eval()
        assert [windows(model_at_side(net, design, 64, s)) for s in (64, 88, 128)] == grown
        assert windows(net) == [8, 4] and model_at_side(net, design, 64, 64) is net


def test_the_cpu_study_plan():
    """The CPU scale leaves some probes (unless named) and two tokenisers to
    the GPU scale and runs on a variant only the designs of its base's
    claims; the GPU scale runs everything."""
    from attention_zoo.probe_study import CPU_VARIANT_DESIGNS, axis_probes, planned
    assert axis_probes('mixer') == ['long_range', 'long_range_far', 'long_range_long',
                                    'long_range_far_long', 'scale_range', 'scale_range_large',
                                    'fine_structure', 'fine_structure_thin']
    assert axis_probes('window') == ['resolution', 'resolution_small', 'resolution_large']
    assert not planned('position:cpe+ceit', 'resolution', 'cpu')        # at the GPU scale
    assert planned('position:cpe+convstem', 'resolution', 'cpu')
    assert planned('mixer:sra', 'long_range', 'cpu') and planned('mixer:sra', 'long_range_long',
                                                                 'cpu')
    assert not planned('mixer:sra', 'long_range_far', 'cpu')
    assert not planned('mixer:global', 'scale_range', 'cpu')
    assert planned('mixer:global', 'scale_range', 'cpu', named=True)     # asked for by name
    assert not planned('mixer:sra', 'long_range_far_long', 'cpu', named=True)
    assert all(planned(d, p, 'gpu') for p in PROBES for d in designs('mixer'))
    for variant, chosen in CPU_VARIANT_DESIGNS.items():
        axis = chosen[0].partition(':')[0]
        assert variant in axis_probes(axis) and get_probe(variant).varies
        assert set(chosen) <= {d for a in ('mixer', 'position', 'window') for d in designs(a)}


def test_run_is_reproducible_and_learns():
    """The same seed gives the same scores; 60 steps of a CPE design on the
    resolution probe leave the trivial solution."""
    scale = Scale(SCALES['cpu'].arch, iters=60, batch=4, lr=3e-3, eval_images=8, head_dims=16)
    runs = [run_probe('position:cpe+overlap', 'resolution', 0, scale) for _ in range(2)]
    assert runs[0].scores == runs[1].scores and set(runs[0].scores) == {'64', '88', '128'}
    assert not is_trivial(runs[0]) and runs[0].foreground['64'] > 0.3
    assert all(runs[0].scores[s] > runs[0].trivial[s] for s in runs[0].scores)
    assert runs[0].steps == 60


def test_probe_schedule_sets_the_steps():
    """A probe's ``schedule`` multiplies the study's steps (scale_range
    trains 1.5x as long: 900 steps at the CPU scale)."""
    probe = get_probe('scale_range')
    assert probe_steps(probe, SCALES['cpu']) == 900 and probe_steps(probe, SCALES['gpu']) == 4500
    assert probe_steps(get_probe('long_range'), SCALES['cpu']) == 600
    scale = Scale(SCALES['smoke'].arch, iters=4, batch=2, lr=2e-3, eval_images=2, head_dims=8)
    run = run_probe('mixer:swin', 'scale_range', 0, scale)
    assert run.steps == 6 and set(run.scores) == {str(probe.train_side)}


def test_merge_runs_takes_the_later_study():
    old = [ProbeRun('mixer:swin', p, s, {'1': 0.1}) for p in ('long_range', 'scale_range')
           for s in (0, 1)]
    new = [ProbeRun('mixer:swin', 'scale_range', s, {'1': 0.9}) for s in (0, 1)]
    merged = merge_runs([old, new])
    assert [(r.probe, r.seed, r.scores['1']) for r in merged] == [
        ('long_range', 0, 0.1), ('long_range', 1, 0.1), ('scale_range', 0, 0.9),
        ('scale_range', 1, 0.9)]


# ------------------------------------------------------------------ report
def _runs(a_mean, b_mean):
    rng = np.random.default_rng(1)
    out = []
    side = str(get_probe('long_range').train_side)
    for design, mean in (('mixer:swin', a_mean), ('mixer:global', b_mean)):
        for seed in range(3):
            v = float(mean + rng.normal(0, 0.01))
            out.append(ProbeRun(design, 'long_range', seed, {side: v}, {side: 0.19},
                                {side: 0.05 if mean < 0.3 else 0.9}, params=90_000))
    for pos in ('absolute', 'cpe'):
        for seed in range(3):
            out.append(ProbeRun(f'position:{pos}+overlap', 'resolution', seed,
                                {'64': 0.6, '88': 0.6, '128': 0.5 + 0.1 * (pos == 'cpe') + seed / 1e3},
                                {'64': 0.2, '88': 0.2, '128': 0.2},
                                {'64': 0.8, '88': 0.8, '128': 0.8}))
    return out


def test_report_tables_and_figures(tmp_path):
    runs = _runs(0.22, 0.88) + [ProbeRun('mixer:swin', 'scale_range', 0, error='boom')]
    text = probe_report(runs, 'set-up')
    assert '| long_range |' in text and '| mixer:swin / mixer:global |' in text and '| yes |' in text
    assert 'global > swin' in text and '⚠3 trivial' in text       # swin never found the discs
    assert '| absolute | 0.600 -> 0.501 ±' in text and 'cpe+overlap > absolute+overlap' in text
    assert '| mixer | params | long_range (rank) |' in text     # no mixer ran resolution
    assert 'failed: 1' in text and 'boom' in text
    assert seed_scores(runs, 'resolution', '64')['position:cpe+overlap'] == [0.6] * 3
    assert {p.name for p in plot_probes(runs, tmp_path)} == {'zoo_resolution.png',
                                                             'zoo_capability.png'}
    same = probe_report(_runs(0.5, 0.5), 'set-up')
    assert '**no**' in same and '0 of 1 pairs separated' in same
    assert '**Main effects**' not in text          # one tokeniser: no grid to pair over
    mixers_only = probe_report([r for r in runs if r.design.startswith('mixer:')], 'set-up')
    assert '**Token mixers**' in mixers_only and '**Position encoding' not in mixers_only
    positions_only = probe_report([r for r in runs if r.probe == 'resolution'], 'set-up')
    assert '**Token mixers**' not in positions_only and '| absolute |' in positions_only


def test_report_main_effects_of_the_grid():
    """The ViT_c stem a little above overlapping patches under every
    encoding: the tokenisation effect is claimed, with its consistency."""
    from attention_zoo.probe_study import POSITION_ENCODINGS
    rng = np.random.default_rng(2)
    runs = []
    for i, pos in enumerate(POSITION_ENCODINGS):
        for tok, lift in (('overlap', 0.), ('convstem', 0.04)):
            for seed in range(3):
                v = 0.4 + 0.05 * i + lift + float(rng.normal(0, 0.004))
                runs.append(ProbeRun(f'position:{pos}+{tok}', 'resolution', seed,
                                     {'64': 0.7, '88': 0.6, '128': v}, {}, {'64': 0.8}))
    text = probe_report(runs, 'set-up')
    assert '**Main effects**' in text and 'resolution at 128 px' in text
    line = next(x for x in text.splitlines() if x.startswith('* **tokenisation**'))
    assert '1 of 1 pairs separated: convstem > overlap (+0.04' in line and 'in 8 of 8' in line
    assert any(x.startswith('* **position encoding** (8 levels') for x in text.splitlines())


def test_report_window_axis_and_claims_across_geometries(tmp_path):
    """The window table at every side, its discrimination pair, and each
    base claim's fate on the variants: held, lost (named with the variant
    and what happened), or not run there; a variant that does not separate
    its known pair is marked."""
    rng = np.random.default_rng(3)
    means = {'resolution': {'window:swin+table': 0.55, 'window:swin+convffn': 0.72,
                            'window:mvit+none': 0.60},
             'resolution_small': {'window:swin+table': 0.50, 'window:swin+convffn': 0.70,
                                  'window:mvit+none': 0.76},
             'resolution_large': {'window:swin+table': 0.60, 'window:swin+convffn': 0.60}}
    runs = []
    for probe, designs_ in means.items():
        for design, mean in designs_.items():
            for seed in range(3):
                v = {s: float(mean + rng.normal(0, 0.005)) for s in ('64', '88', '128')}
                runs.append(ProbeRun(design, probe, seed, v, {}, {'64': 0.8}))
    text = probe_report(runs, 'set-up')
    assert '| swin | table | 0.5' in text and 'on resolution_small: mIoU' in text
    assert '| resolution | shapes' in text and 'window:swin+table / window:swin+convffn' in text
    line = next(x for x in text.splitlines() if x.startswith('* **resolution, window axis'))
    assert line.startswith('* **resolution, window axis (on resolution_small, resolution_large '
                           '[its known pair not separated])**')
    assert ('of 3 claims, 1 held on every variant that ran both: mvit+none > swin+table; 2 did '
            'not: swin+convffn > swin+table (resolution_large: not separated), swin+convffn > '
            'mvit+none (resolution_small: reversed).') in line
    assert 'zoo_window.png' in {p.name for p in plot_probes(runs, tmp_path)}


def test_claim_fate():
    from attention_zoo.ranking import Claim, claim_fate
    supported = [Claim('a', 'b', 0.1, 0.01)]
    assert claim_fate('a', 'b', supported, 'abc') == 'held'
    assert claim_fate('b', 'a', supported, 'abc') == 'reversed'
    assert claim_fate('a', 'c', supported, 'abc') == 'not separated'
    assert claim_fate('a', 'd', supported, 'abc') == 'not run'


@pytest.mark.parametrize('scale', ['cpu', 'gpu'])
def test_every_design_builds_and_runs(scale):
    """Every design of every axis at both scales builds and maps an image of
    each probe's sides to per-pixel logits (a design that cannot is caught
    here, not in an hour-long study)."""
    import torch

    from attention_zoo.probe_study import AXES, axis_probes, build_probe_net
    s = SCALES[scale]
    torch.manual_seed(0)
    for axis in AXES:
        sides = sorted({side for p in axis_probes(axis) for side in get_probe(p).eval_sides})
        for design in designs(axis):
            net = build_probe_net(design_backbone(design, s), 3, 8).eval()
            for side in sides:
                with torch.no_grad():
                    out = net(torch.randn(1, 3, side, side))
                assert out.shape == (1, 3, side, side) and torch.isfinite(out).all(), design

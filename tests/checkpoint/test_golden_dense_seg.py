"""Released-layout segmentor checkpoints against the OFFICIAL mmseg 0.x pipeline
(tests/data/golden_dense, see its README: "Segmentation").

Each official segmentor (built from the official config, mmseg 0.30.0, mmcv-full
1.7.2, torch 1.13.1) was given deterministic weights (tests/golden_dense.py),
saved with mmcv's ``save_checkpoint`` and run through
``mmseg.apis.inference_segmentor`` (the official test pipeline, AlignResize
included, and the bilinear resize of the logits back to the image) on two
synthetic images.  Here the same file is remade from the fixture's key list,
converted by ``tools/convert_checkpoint.py --config`` for our config (150 ADE20K
classes as in the official one) and run through mmseg 1.2's ``init_model`` /
``inference_model``; preprocessing, FPN features, the logits at the original
size and the label maps must match the official ones.

Tolerances (float32 on both sides; torch 1.13 / mmcv-full 1.7.2 / numpy 1.23
against torch 2.14 / mmcv 2.1 / numpy 2.4 here, OpenCV on both):

* preprocessed input (resize to the 2048x512 scale, align to multiples of 32,
  normalise): the same resized shape and scale factor; the fingerprint within
  1e-5 of the largest value (both sides resize with the same OpenCV bilinear
  call, so only float rounding is expected);
* backbone outputs, FPN outputs (Semantic FPN) and the logits at the original
  size: fingerprints (mean, std, abs max, 64 strided samples) within 1e-4 of
  max(1, abs max): float32
  reassociation through ~20 transformer blocks on different torch builds gives
  relative differences of 1e-7..1e-6, two orders below;
* label maps (argmax of the logits): a pixel may differ only where the two
  largest logits are within ``LABEL_MARGIN`` = 1e-3 of each other in OUR logits
  and the official label is our second choice.  1e-3 is far above the
  measured logit differences (abs <= 1.4e-6 x max(1, abs max), i.e. <= 4e-5
  in logit units) yet far below the typical margin (median 0.12..1.9 by case);
  random-weight logits are smooth fields, so 0.1 % of the pixels lie on a
  class boundary with a margin under 2e-4..3e-3.  At most 0.05 % of the pixels
  may differ at all (measured: none in any case).

QuadTree (``quadtree_b2_fpn``) keeps the top-32 keys of every query at each
quadtree level, a discrete choice: where two keys' attention probabilities
are within rounding of each other, the float summation order decides which
is kept, and the output then moves by far more than rounding (the official
code itself, 1 vs 2 threads on the same image: two rows flipped at a relative
gap of 1.0e-6, features 1.2e-3 apart after the cascade).  Its images are
textured (no exact ties), but each still has ~10 of its 46,816 selection rows
within 1e-6: unpinned, our first differing row sits at an official gap of
2e-7..9e-7 and the features end 3e-4..2.3e-3 off.  So the record lists, per
image, every row whose official k-th and (k+1)-th probabilities are within
``rel_gap`` = 1e-4 (1,198 / 1,139 rows) with the official choice among those
near ties, and :class:`OfficialNearTies` makes our selections take it.  The
tolerances above stay; in addition every official selection must be met,
a listed row of ours may differ from the official one only among its near
ties (``unexplained`` = 0; a different choice anywhere else would show in the
features), and the keys swapped must be near ties in our probabilities too
(``max_own_gap`` <= ``rel_gap``; measured <= 6.6e-7, 1 or 2 swapped rows per
image).

Measured (2 images per case): input 5e-8, features <= 1.8e-6, logits <= 1.4e-6,
no differing label (QuadTree: features <= 5.7e-7, logits <= 3.8e-7, with 1
thread and with 2).
"""
import base64
import io
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch

from ..golden_dense import DATA, convert_official, fingerprint, fingerprint_error, load_record
from ..tools import load_tool

ROOT = Path(__file__).resolve().parents[2]
CONVERT = load_tool('convert_checkpoint.py')

#: fixture -> our config for the same model
CASES = {'p2t_s_fpn': 'configs/p2t_s_fpn_ade20k.py',
         'agent_pvt_s_fpn': 'configs/agent_pvt_s_fpn_ade20k.py',
         'focalnet_t_srf_upernet': 'configs/focalnet_t_srf_upernet_ade20k.py',
         'litv2_s_fpn': 'configs/litv2_s_fpn_ade20k.py',
         'quadtree_b2_fpn': 'configs/quadtree_b_fpn_ade20k.py'}
#: cases whose measured disagreement is documented (fixture -> reason)
XFAIL = {}

INPUT_TOL = 1e-5
FEATURE_TOL = 1e-4
LOGIT_TOL = 1e-4
LABEL_MARGIN = 1e-3
LABEL_FRACTION = 5e-4


def decode_labels(b64: str) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))))


def compare_labels(logits: torch.Tensor, ref_labels: np.ndarray) -> dict:
    """Pixels where our argmax differs from the official label, and whether each
    is a near tie in our logits with the official label second."""
    top2 = logits.topk(2, dim=0)
    ours = top2.indices[0].numpy()
    assert ours.shape == ref_labels.shape
    diff = ours != ref_labels
    margin = (top2.values[0] - top2.values[1]).numpy()[diff]
    second = top2.indices[1].numpy()[diff] == ref_labels[diff]
    return dict(differing=int(diff.sum()), of=int(diff.size),
                max_margin=float(margin.max()) if diff.any() else 0.0,
                not_second=int((~second).sum()),
                over_margin=int((margin > LABEL_MARGIN).sum()))


class OfficialNearTies:
    """Within this context our QuadTree attention keeps, among keys whose
    OFFICIAL attention probabilities lie within ``rel_gap`` of the k-th
    largest, the ones the official code kept (the record's ``near_ties``);
    every other top-k choice stays ours.

    ``near_ties['selections'][i]`` lists, for the i-th selection in call order
    (blocks in order, coarse to fine; the coarsest level, then every non-final
    level), the rows (``batch * head * queries + query`` on that level's grid)
    whose official k-th and (k+1)-th probabilities are within ``rel_gap``:
    ``[row, keys kept, keys left out]``, the keys within ``rel_gap`` of the
    k-th on either side.  A row of ours that keeps a left-out key instead of a
    kept one swaps them; one whose key set differs otherwise is counted as
    ``unexplained``.  ``max_own_gap``: the largest relative difference, in
    OUR probabilities, between two swapped keys (a near tie here as well).
    Observes :mod:`vattn_mm.layers.quadtree_attention` through its module
    functions ``coarse_to_fine_attention`` (the level sizes), ``top_keys`` (the
    coarsest level), ``gathered_scores`` (the parents of a finer level) and
    ``top_k`` (a finer level's choice among the parents' children)."""

    NAMES = ('coarse_to_fine_attention', 'top_keys', 'gathered_scores', 'top_k')

    def __init__(self, near_ties: dict):
        self.rel_gap = near_ties['rel_gap']
        self.pins = [{row: (kept, out) for row, kept, out in sel}
                     for sel in near_ties['selections']]
        self.selections = self.pinned = self.swapped = self.unexplained = 0
        self.max_own_gap = 0.0

    def report(self) -> dict:
        return dict(selections=self.selections, pinned_rows=self.pinned,
                    swapped_rows=self.swapped, unexplained=self.unexplained,
                    max_own_gap=self.max_own_gap)

    def _pin(self, own: list, kept: list, out: list, gap) -> Optional[list]:
        """Our key list with the official choice among the near ties; ``gap(a, b)``
        is our relative probability difference of keys a and b."""
        missing = [k for k in kept if k not in own]
        extra = [k for k in own if k in out]
        if len(missing) != len(extra):
            self.unexplained += 1
            return None
        if not missing:
            return None
        self.swapped += 1
        for a, b in zip(extra, missing):
            self.max_own_gap = max(self.max_own_gap, float(gap(a, b)))
        swap = dict(zip(extra, missing))
        return [swap.get(k, k) for k in own]

    def __enter__(self):
        import vattn_mm.layers.quadtree_attention as qa
        self.qa, self.saved = qa, {name: getattr(qa, name) for name in self.NAMES}
        orig = self.saved

        def coarse_to_fine_attention(queries, keys, values, sizes, *args, **kwargs):
            self.sizes, self.level, self.parents = sizes, 0, None
            return orig['coarse_to_fine_attention'](queries, keys, values, sizes, *args, **kwargs)

        def top_keys(q, k, topk, fast=True):
            index = orig['top_keys'](q, k, topk, fast)                 # (G, N, topk)
            pins = self._next()
            n = index.shape[1]
            for row, (kept, out) in pins.items():
                g, i = divmod(row, n)

                def gap(a, b):   # probabilities are exp(score / sqrt(D)) / Z
                    s = (k[g, [a, b]] @ q[g, i]) * q.shape[-1] ** -0.5
                    return torch.expm1((s[0] - s[1]).abs())
                new = self._pin(index[g, i].tolist(), kept, out, gap)
                if new is not None:
                    index[g, i] = torch.tensor(new)
            return index

        def gathered_scores(q, k, index, fast=True):
            self.level += 1
            self.parents = index                                        # (G, P, K)
            return orig['gathered_scores'](q, k, index, fast)

        def top_k(scores, k):
            values, pos = orig['top_k'](scores, k)                     # (G, P, 4, k)
            pins = self._next()
            if not pins:
                return values, pos
            h, w = self.sizes[self.level]
            # the candidates' keys on this level's grid: children (dy, dx) of each parent
            cand = qa.child_index(self.parents.unsqueeze(-1), torch.arange(4),
                                  self.sizes[self.level - 1][1]).flatten(-2)  # (G, P, 4K)
            pos = pos.clone()
            for row, (kept, out) in pins.items():
                g, i = divmod(row, h * w)
                y, x = divmod(i, w)
                p, f = (y // 2) * (w // 2) + x // 2, (y % 2) * 2 + x % 2
                keys = cand[g, p].tolist()
                own = [keys[j] for j in pos[g, p, f].tolist()]
                new = self._pin(own, kept, out, lambda a, b: (
                    (scores[g, p, f, keys.index(a)] - scores[g, p, f, keys.index(b)]).abs()
                    / scores[g, p, f, keys.index(b)]))
                if new is not None:
                    pos[g, p, f] = torch.tensor([keys.index(key) for key in new])
            return scores.gather(-1, pos), pos

        for name, fn in zip(self.NAMES, (coarse_to_fine_attention, top_keys, gathered_scores, top_k)):
            setattr(qa, name, fn)
        return self

    def _next(self) -> dict:
        if self.selections >= len(self.pins):
            raise AssertionError(f'more selections than the {len(self.pins)} official ones')
        pins = self.pins[self.selections]
        self.selections += 1
        self.pinned += len(pins)
        return pins

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.qa, name, fn)


def params(cases):
    return [pytest.param(c, marks=pytest.mark.xfail(reason=XFAIL[c], strict=True))
            if c in XFAIL else c for c in sorted(cases)]


def run_ours(config: str, checkpoint: Path, images: dict) -> dict:
    """Our inference on each image of ``images`` (the record's), QuadTree's
    near ties taken as the official code chose them where the record has them."""
    from mmseg.apis import inference_model, init_model
    model = init_model(config, str(checkpoint), device='cpu')
    seen = {}
    model.backbone.register_forward_pre_hook(lambda m, a: seen.__setitem__('input', a[0]))
    model.backbone.register_forward_hook(lambda m, a, o: seen.__setitem__('backbone', o))
    if model.with_neck:
        model.neck.register_forward_hook(lambda m, a, o: seen.__setitem__('neck', o))
    results = {}
    for name, ref in images.items():
        pins = OfficialNearTies(ref['near_ties']) if 'near_ties' in ref else nullcontext()
        with torch.no_grad(), pins:
            sample = inference_model(model, str(DATA / name))
        logits = sample.seg_logits.data.float()
        assert torch.equal(sample.pred_sem_seg.data[0], logits.argmax(0))
        results[name] = dict(meta=sample.metainfo, input=fingerprint(seen['input']),
                             features={k: [fingerprint(f) for f in seen[k]]
                                       for k in ('backbone', 'neck') if k in seen},
                             logits=logits)
        if 'near_ties' in ref:
            results[name]['near_ties'] = pins.report()
    return results


@pytest.mark.slow
@pytest.mark.needs('mmseg')
@pytest.mark.parametrize('case', params(CASES))
def test_converted_official_checkpoint_reproduces_official_segmentation(case, tmp_path):
    rec = load_record(case)
    ckpt = convert_official(case, ROOT / CASES[case], tmp_path, CONVERT.main)
    written = torch.load(ckpt, weights_only=True)
    assert written['meta']['dataset_meta']['classes'] == tuple(rec['checkpoint']['meta']['CLASSES'])
    ours = run_ours(str(ROOT / CASES[case]), ckpt, rec['images'])
    report = {}
    for name, ref in rec['images'].items():
        got = ours[name]
        meta = got['meta']
        assert list(meta['ori_shape']) == ref['ori_shape'][:2]
        assert list(meta['img_shape']) == ref['img_shape'][:2]
        assert list(got['input']['shape'][2:]) == ref['pad_shape'][:2]
        assert np.allclose(meta['scale_factor'], ref['scale_factor'][:2], atol=1e-6)
        assert sorted(got['features']) == sorted(k for k in ('backbone', 'neck') if k in ref)
        assert all(len(got['features'][k]) == len(ref[k]) for k in got['features'])
        report[name] = dict(
            input_err=fingerprint_error(got['input'], ref['input']),
            feature_err=max(fingerprint_error(o, r) for k, fs in got['features'].items()
                            for o, r in zip(fs, ref[k])),
            logit_err=fingerprint_error(fingerprint(got['logits']), ref['logits']),
            labels=compare_labels(got['logits'], decode_labels(ref['labels_png'])))
        if 'near_ties' in got:
            report[name]['near_ties'] = got['near_ties']
    print(json.dumps(report, indent=1))
    for name, r in report.items():
        assert r['input_err'] <= INPUT_TOL, (name, r)
        assert r['feature_err'] <= FEATURE_TOL, (name, r)
        assert r['logit_err'] <= LOGIT_TOL, (name, r)
        lab = r['labels']
        assert lab['over_margin'] == 0 and lab['not_second'] == 0, (name, r)
        assert lab['differing'] <= LABEL_FRACTION * lab['of'], (name, r)
        if 'near_ties' in r:
            ties, ref = r['near_ties'], rec['images'][name]['near_ties']
            assert ties['selections'] == len(ref['selections']), (name, r)
            assert ties['unexplained'] == 0, (name, r)
            assert ties['max_own_gap'] <= ref['rel_gap'], (name, r)

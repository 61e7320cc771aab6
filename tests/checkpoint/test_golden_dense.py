"""Released-layout detector checkpoints against the OFFICIAL mmdet 2.x pipeline
(tests/data/golden_dense, see its README).

The official PVTv2-b2 and Agent-PVT-S RetinaNet / Mask R-CNN (whai362/PVT and
LeapLabTHU/Agent-Attention configs, mmdet 2.28.2, mmcv-full 1.7.2) were given
deterministic weights (tests/golden_dense.py), saved with mmcv's
``save_checkpoint`` and run through ``mmdet.apis.inference_detector`` on two
synthetic images.  Here the same file is remade from the fixture's key
list, converted by ``tools/convert_checkpoint.py --config`` for our config (as it
is: 80 classes, the official configs' own) and run through mmdet 3.3's
``init_detector`` / ``inference_detector``; preprocessing, FPN features,
boxes, scores, labels and masks must match the official ones.

Tolerances (float32 on both sides; torch 1.13 / mmcv-full 1.7.2 / numpy 1.23 against
torch 2.14 / mmcv 2.1 / numpy 2.4 here, OpenCV 5.1 on both), with what was measured
(2 images per case):

* preprocessed input (resize, normalise, pad): same image shape, scale factor and
  padded shape; the fingerprint (mean, std, max, 64 strided samples) within 1e-5
  of the largest value (measured 5e-8: the same pixels to float rounding);
* FPN outputs: fingerprints within 1e-4 relative (measured <= 8e-7);
* detections, matched greedily by label and IoU >= 0.9 from the highest
  official score down: scores within 1e-4 absolute (measured <= 4e-6), box
  coordinates within 1e-2 px (measured <= 4e-4).  A detection may go unmatched
  only where a rounding-sized change legitimately decides, a score within 1e-4
  of the 0.05 threshold or of the 100th score when an image has the 100
  detections the cap allows, and at most 2 per image (measured: none);
* masks: binarised at 0.5 after the paste, and the random mask logits are small
  (sigmoid 0.5 +- 0.03), so the 4e-4 px box differences flip the pixels whose
  probability lies within ~1e-5 of 0.5: at most 4 + 0.5 % of a mask's area per
  mask and 0.5 % of all mask pixels per image (measured: 6 and 10 pixels
  of 110k and 27k mask pixels, at most 2 in one mask).
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ..golden_dense import (DATA, convert_official, fingerprint, fingerprint_error, generate,
                           load_record, sha256)
from ..tools import load_tool

ROOT = Path(__file__).resolve().parents[2]
CONVERT = load_tool('convert_checkpoint.py')

#: fixture -> our config for the same model
CASES = {'pvtv2_b2_retinanet': 'configs/pvtv2_b2_retinanet_coco.py',
         'pvtv2_b2_maskrcnn': 'configs/pvtv2_b2_maskrcnn_coco.py',
         'agent_pvt_s_retinanet': 'configs/agent_pvt_s_retinanet_coco.py',
         'agent_pvt_s_maskrcnn': 'configs/agent_pvt_s_maskrcnn_coco.py'}
#: ``make test-extended``: the RetinaNet of the second backbone (that backbone's Mask R-CNN
#: and PVTv2-b2's RetinaNet are in ``make test``)
EXTENDED = ('agent_pvt_s_retinanet', )

INPUT_TOL = 1e-5
FEATURE_TOL = 1e-4
SCORE_TOL = 1e-4
BOX_TOL = 1e-2
MASK_TOL = 0.005
MASK_PIXELS = 4
MATCH_IOU = 0.9
#: unmatched detections allowed per image (only near the threshold / the cap)
MAX_UNMATCHED = 2









def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU; two boxes of zero area (clipped flat at the border, which mmdet 2.x
    single-stage heads keep) count 1 where their corners agree within BOX_TOL."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    union = area(a)[:, None] + area(b)[None] - inter
    flat = np.abs(a[:, None] - b[None]).max(-1) <= BOX_TOL
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), flat.astype(float))


def decode_masks(rles: list) -> np.ndarray:
    import pycocotools.mask as mask_util
    return np.stack([mask_util.decode(dict(size=r['size'], counts=r['counts'].encode()))
                     for r in rles]).astype(bool)


def compare_detections(ours: dict, ref: dict, score_thr: float, cap: int) -> dict:
    """Match ``ours`` to the official detections; the measured differences and
    the detections left unmatched on either side."""
    rb, rs, rl = (np.array(ref[k], dtype=np.float64).reshape(-1, *s)
                  for k, s in (('boxes', (4,)), ('scores', ()), ('labels', ())))
    ob, os_, ol = ours['boxes'], ours['scores'], ours['labels']
    iou = box_iou(rb, ob) if len(rb) and len(ob) else np.zeros((len(rb), len(ob)))
    taken = np.zeros(len(ob), bool)
    pairs = []
    for i in np.argsort(-rs, kind='stable'):
        cand = np.flatnonzero(~taken & (ol == rl[i]) & (iou[i] >= MATCH_IOU))
        if len(cand):
            j = cand[np.argmin(np.abs(os_[cand] - rs[i]))]
            taken[j] = True
            pairs.append((i, j))
    matched_ref = {i for i, _ in pairs}
    out = dict(n_ref=len(rs), n_ours=len(os_), pairs=pairs,
               unmatched_ref=[float(rs[i]) for i in range(len(rs)) if i not in matched_ref],
               unmatched_ours=[float(os_[j]) for j in np.flatnonzero(~taken)])
    if pairs:
        i, j = map(np.array, zip(*pairs))
        out['score_err'] = float(np.abs(rs[i] - os_[j]).max())
        out['box_err'] = float(np.abs(rb[i] - ob[j]).max())
        out['min_iou'] = float(iou[i, j].min())
    # where a rounding-sized change may legitimately decide
    edges = [score_thr] + ([float(np.sort(rs)[-cap])] if len(rs) >= cap else [])
    out['unexplained'] = [s for s in out['unmatched_ref'] + out['unmatched_ours']
                          if min(abs(s - e) for e in edges) > SCORE_TOL]
    if 'masks' in ref and pairs:
        ref_masks = decode_masks(ref['masks'])
        diff = [int((ref_masks[i] != ours['masks'][j]).sum()) for i, j in pairs]
        area = [int(ref_masks[i].sum()) for i, _ in pairs]
        out['mask_pixels'] = dict(differing=sum(diff), of=sum(area), max_per_mask=max(diff))
        out['masks_off'] = [(d, a) for d, a in zip(diff, area) if d > MASK_PIXELS + MASK_TOL * a]
    return out


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """``converted(case) -> path``: the official file remade from the fixture
    and converted by tools/convert_checkpoint.py --config, once a module."""
    cache = {}

    def get(case: str):
        if case not in cache:
            cache[case] = convert_official(case, ROOT / CASES[case],
                                           tmp_path_factory.mktemp(case), CONVERT.main)
        return cache[case]
    return get


def run_ours(config: str, checkpoint: Path, images: list) -> dict:
    from mmdet.apis import inference_detector, init_detector
    model = init_detector(config, str(checkpoint), device='cpu')
    seen = {}
    model.backbone.register_forward_pre_hook(lambda m, a: seen.__setitem__('input', a[0]))
    model.neck.register_forward_hook(lambda m, a, o: seen.__setitem__('neck', o))
    results = {}
    for name in images:
        with torch.no_grad():
            sample = inference_detector(model, str(DATA / name))
        pred = sample.pred_instances
        det = dict(boxes=pred.bboxes.double().numpy(), scores=pred.scores.double().numpy(),
                   labels=pred.labels.numpy())
        if 'masks' in pred:
            det['masks'] = pred.masks.numpy().astype(bool)
        results[name] = dict(meta=sample.metainfo, input=fingerprint(seen['input']),
                             neck=[fingerprint(f) for f in seen['neck']], detections=det)
    return results


@pytest.mark.slow
@pytest.mark.needs('mmdet', 'mmcv.ops')
@pytest.mark.parametrize('case', [pytest.param(c, marks=pytest.mark.extended) if c in EXTENDED
                                  else c for c in sorted(CASES)])
def test_converted_official_checkpoint_reproduces_official_detections(case, converted):
    rec = load_record(case)
    written = torch.load(converted(case), weights_only=True)
    assert written['meta']['dataset_meta']['classes'] == tuple(rec['checkpoint']['meta']['CLASSES'])
    test_cfg = rec['test_cfg'].get('rcnn', rec['test_cfg'])
    ours = run_ours(str(ROOT / CASES[case]), converted(case), list(rec['images']))
    report = {}
    for name, ref in rec['images'].items():
        got = ours[name]
        meta = got['meta']
        assert list(meta['ori_shape']) == ref['ori_shape'][:2]
        assert list(meta['img_shape']) == ref['img_shape'][:2]
        assert list(got['input']['shape'][2:]) == ref['pad_shape'][:2]
        assert np.allclose(meta['scale_factor'], ref['scale_factor'][:2], atol=1e-6)
        input_err = fingerprint_error(got['input'], ref['input'])
        neck_err = max(fingerprint_error(o, r) for o, r in zip(got['neck'], ref['neck']))
        assert len(got['neck']) == len(ref['neck'])
        cmp = compare_detections(got['detections'], ref['detections'], test_cfg['score_thr'],
                                 test_cfg['max_per_img'])
        report[name] = dict(input_err=input_err, neck_err=neck_err,
                            **{k: v for k, v in cmp.items() if k != 'pairs'})
    print(json.dumps(report, indent=1))
    for name, r in report.items():
        assert r['input_err'] <= INPUT_TOL, (name, r)
        assert r['neck_err'] <= FEATURE_TOL, (name, r)
        unmatched = len(r['unmatched_ref']) + len(r['unmatched_ours'])
        assert r['n_ref'] > 0 and unmatched <= MAX_UNMATCHED, (name, r)
        assert not r['unexplained'], (name, r)
        assert r['score_err'] <= SCORE_TOL and r['box_err'] <= BOX_TOL, (name, r)
        if 'mask_pixels' in r:
            assert not r['masks_off'], (name, r)
            assert r['mask_pixels']['differing'] <= MASK_TOL * r['mask_pixels']['of'], (name, r)


@pytest.mark.parametrize('case', sorted(p.stem for p in DATA.glob('*.json')))
def test_generator_remakes_the_official_weights(case):
    """The generator gives here, bit for bit, the tensors the lab saved
    (Python 3.8, numpy 1.23, torch 1.13), for every fixture."""
    rec = load_record(case)
    sd = generate(rec['checkpoint']['keys'], rec['rule'])
    assert [k for k, _, _ in rec['checkpoint']['keys']] == list(sd)
    assert sha256(sd) == rec['checkpoint']['sha256']

"""Deterministic weights for the dense golden fixtures (tests/data/golden_dense).

A released detector checkpoint (PVTv2-b2 RetinaNet / Mask R-CNN, ~100 MB) cannot
be committed, so the fixtures record only its key list (key, shape, dtype) and a
rule id; :func:`generate` remakes every tensor from the key alone, the same on
the official side (Python 3.8, numpy 1.23, torch 1.13, where the fixtures were
made) and here.  ``numpy.random.RandomState`` (the legacy generator, whose
streams numpy keeps stable across versions) is seeded with ``zlib.crc32`` of
the key; values are drawn in float64 and rounded once to the key's dtype.

This file must run unchanged under Python 3.8: the lab imports it to make the
official checkpoints.
"""
import zlib
from pathlib import Path

import numpy as np
import torch

#: rule id -> how each tensor is made from the key's N(0, 1) stream
RULES = {
    # dim >= 2: N(0, 1) / sqrt(fan_in), fan_in = prod(shape[1:]);
    # 1-D ``*.weight`` (the norms): 1 + 0.02 N;  ``*.bias``: 0.02 N;
    # BN running_mean 0, running_var 1, num_batches_tracked 0
    'v1': dict(norm=0.02, bias=0.02, scale={}, shift={}, shift_last={}),
    # v1 with sharper classifiers, so that random weights give detections that
    # discriminate: with v1 every RetinaNet image has 100 detections (the cap)
    # of one class within 0.835..0.856, every Mask R-CNN image 100 within
    # 0.087..0.162.  v2 scales the classifier weights (wider logit spread),
    # lowers RetinaNet's class biases (the focal-loss prior does the same) and
    # raises Mask R-CNN's background logit (last class), giving 32..100
    # RetinaNet and 50..67 Mask R-CNN detections per image whose scores spread
    # from the 0.05 threshold to 0.1..0.25
    'v2': dict(norm=0.02, bias=0.02,
               scale={'bbox_head.retina_cls.weight': 10.0,
                      'roi_head.bbox_head.fc_cls.weight': 3.0},
               shift={'bbox_head.retina_cls.bias': -19.5},
               shift_last={'roi_head.bbox_head.fc_cls.bias': 10.0}),
    # v1 with classifiers fitted to Agent-PVT, whose stage outputs have no final
    # norm: its FPN outputs are ~3x those of PVTv2 (std 2.6..6.2 against
    # 1.0..2.0), and v2 gives Mask R-CNN 100 detections per image at 0.987..1.0
    # and RetinaNet none.  v3 gives Mask R-CNN 55 detections at 0.050..0.203
    # and 100 (the cap) at 0.267..0.473, RetinaNet 100 (the cap) at
    # 0.074..0.199 and 84 at 0.050..0.146
    'v3': dict(norm=0.02, bias=0.02,
               scale={'bbox_head.retina_cls.weight': 3.0,
                      'roi_head.bbox_head.fc_cls.weight': 0.7},
               shift={'bbox_head.retina_cls.bias': -15.5},
               shift_last={'roi_head.bbox_head.fc_cls.bias': 8.5}),
}

DTYPES = {'torch.float32': torch.float32, 'torch.float16': torch.float16,
          'torch.float64': torch.float64, 'torch.int64': torch.int64}


def _normal(key: str, shape) -> np.ndarray:
    rng = np.random.RandomState(zlib.crc32(key.encode('utf-8')))
    return rng.standard_normal(size=tuple(shape))


def generate_tensor(key: str, shape, dtype: str = 'torch.float32',
                    rule: str = 'v1') -> torch.Tensor:
    """The tensor of ``key`` under ``rule`` (see :data:`RULES`)."""
    spec = RULES[rule]
    shape = tuple(int(s) for s in shape)
    tdtype = DTYPES[str(dtype)]
    leaf = key.rsplit('.', 1)[-1]
    if leaf == 'num_batches_tracked':
        return torch.zeros(shape, dtype=tdtype)
    if leaf == 'running_mean':
        return torch.zeros(shape, dtype=tdtype)
    if leaf == 'running_var':
        return torch.ones(shape, dtype=tdtype)
    if not tdtype.is_floating_point:
        raise ValueError(f'{key}: no rule for a {dtype} tensor')
    noise = _normal(key, shape)
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        values = noise / np.sqrt(fan_in)
    elif len(shape) == 1 and leaf == 'weight':
        values = 1.0 + spec['norm'] * noise
    elif len(shape) == 1 and leaf == 'bias':
        values = spec['bias'] * noise
    else:
        raise ValueError(f'{key}: no rule for shape {shape}')
    values = values * spec['scale'].get(key, 1.0) + spec['shift'].get(key, 0.0)
    if key in spec['shift_last']:
        values[-1] += spec['shift_last'][key]
    return torch.from_numpy(values).to(tdtype)


def generate(keys, rule: str = 'v1') -> 'dict[str, torch.Tensor]':
    """An ordered state dict from ``keys``: (key, shape, dtype) triples, in the
    order the official model's ``state_dict()`` lists them."""
    return {key: generate_tensor(key, shape, dtype, rule) for key, shape, dtype in keys}


# ------------------------------------------------------------------ what the tests share
#: the fixtures: one JSON record per case, and the images
DATA = Path(__file__).resolve().parent / 'data' / 'golden_dense'


def load_record(case: str) -> dict:
    import json
    return json.loads((DATA / (case + '.json')).read_text())


def write_official(rec: dict, path) -> None:
    """The file the lab wrote with mmcv's ``save_checkpoint``: ``{'meta',
    'state_dict'}`` with the generated tensors in key order, ``meta['CLASSES']``
    a tuple."""
    from collections import OrderedDict
    meta = dict(rec['checkpoint']['meta'])
    meta['CLASSES'] = tuple(meta['CLASSES'])
    state_dict = OrderedDict(generate(rec['checkpoint']['keys'], rec['rule']))
    torch.save({'meta': meta, 'state_dict': state_dict}, path)


def sha256(state_dict) -> str:
    """SHA-256 of the tensors' bytes in key order."""
    import hashlib
    digest = hashlib.sha256()
    for value in state_dict.values():
        digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


def fingerprint(t: torch.Tensor, n: int = 64) -> dict:
    """Shape, mean, std, largest magnitude and ``n`` strided samples."""
    flat = t.detach().double().flatten()
    step = max(1, flat.numel() // n)
    return dict(shape=list(t.shape), mean=flat.mean().item(), std=flat.std().item(),
                abs_max=flat.abs().max().item(), samples=flat[::step][:n].tolist())


def fingerprint_error(ours: dict, ref: dict) -> float:
    """Largest difference of two fingerprints over max(1, the reference's largest magnitude)."""
    assert ours['shape'] == ref['shape']
    a = np.array([ours['mean'], ours['std'], ours['abs_max'], *ours['samples']])
    b = np.array([ref['mean'], ref['std'], ref['abs_max'], *ref['samples']])
    return float(np.abs(a - b).max() / max(1.0, ref['abs_max']))


def convert_official(case: str, config, tmp, convert) -> Path:
    """The case's official file written in ``tmp`` and converted for
    ``config`` by ``convert`` (``tools/convert_checkpoint.py``'s ``main``);
    the path of the converted checkpoint."""
    src, out = Path(tmp) / (case + '_official.pth'), Path(tmp) / (case + '_vattn.pth')
    write_official(load_record(case), src)
    convert([str(src), str(out), '--config', str(config)])
    src.unlink()
    return out

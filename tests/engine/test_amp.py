"""Mixed precision on the CPU: every backbone runs forward and backward under
bfloat16 and float16 autocast with finite outputs and gradients close to
float32, and so do the demo Mask R-CNN and UperNet (mmcv's nms / RoIAlign run
in float32 there inside ``float32_mmcv_ops()``, what ``float32_mmcv_ops = True``
makes SafeRunner open; see vattn_mm/utils/amp.py).  AmpOptimWrapper itself needs a
GPU; it wraps the same autocast around the same model."""
import importlib

import pytest
import torch
from ..backbone_cases import CASES, build_micro
from mmengine.config import Config
from mmengine.registry import MODELS, init_default_scope
from ..project.test_configs import det_batch, seg_batch
from ..tools import dev_package
from .test_training import DET_DEMO, ROOT, SEG_DEMO
from torch import nn

from vattn_mm.utils import float32_mmcv_ops, float32_unless_native

FINITE_ONLY = dev_package('gpu_check').FINITE_ONLY
check_autocast = dev_package('gpu_check').check_autocast

DTYPES = [torch.bfloat16, torch.float16]
#: max |bf16 - fp32| / max |fp32| of the backbone outputs (8 mantissa bits);
#: measured on the micro archs: 0.7e-2 .. 1.3e-2
BF16_REL_TOL = 5e-2


@pytest.mark.parametrize('name', CASES)
def test_backbone_forward_backward_under_bf16_autocast(name):
    model = build_micro(name).train()
    matmul_dtypes = set()
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            module.register_forward_hook(lambda m, i, o: matmul_dtypes.add(o.dtype))
    x = torch.randn(2, 3, 64, 64)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outs = model(x)
    assert matmul_dtypes == {torch.bfloat16}, 'linear / conv layers did not run in bf16'
    assert all(torch.isfinite(o).all() for o in outs)
    sum(o.float().square().mean() for o in outs).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all()
               for g in grads)
    assert sum(bool(g.abs().sum() > 0) for g in grads) > 0.9 * len(grads)
    model.eval()
    with torch.no_grad():
        ref = model(x)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = model(x)
    err = max(((a.float() - b).abs().max() / b.abs().max()).item() for a, b in zip(low, ref))
    assert err <= BF16_REL_TOL, f'{name}: relative error {err:.3g} vs float32'


def _cpu_float16_autocast() -> bool:
    try:
        with torch.autocast('cpu', dtype=torch.float16):
            return True
    except RuntimeError:   # torch 2.1: 'AutocastCPU only support Bfloat16'
        return False


@pytest.mark.skipif(not _cpu_float16_autocast(), reason='this torch has no CPU float16 autocast')
@pytest.mark.parametrize('name', CASES)
def test_backbone_forward_backward_under_fp16_autocast(name):
    """Finite, and within the GPU check's float16 tolerances of float32
    (.dev_scripts/gpu_check/precision.py; finite only for its FINITE_ONLY families)."""
    model = build_micro(name)
    metrics = check_autocast(model, torch.randn(2, 3, *CASES[name].micro_size), [torch.float16],
                             finite_only=name in FINITE_ONLY)
    assert set(metrics) == {'float16 out', 'float16 grad'}


@pytest.mark.needs('mmcv.ops')
@pytest.mark.parametrize('dtype', DTYPES, ids=str)
@float32_mmcv_ops()
def test_detection_ops_fall_back_to_float32(dtype):
    import mmcv.ops
    from mmcv.ops import RoIAlign, batched_nms
    boxes = torch.rand(64, 4) * 50
    boxes[:, 2:] += boxes[:, :2] + 5
    scores, idxs = torch.rand(64), torch.randint(0, 3, (64,))
    for nms in (mmcv.ops.nms, importlib.import_module('mmcv.ops.nms').nms):
        dets, keep = nms(boxes.to(dtype), scores.to(dtype), 0.5)
        _, keep32 = nms(boxes.to(dtype).float(), scores.to(dtype).float(), 0.5)
        assert dets.dtype == dtype and torch.equal(keep, keep32)
    dets, _ = batched_nms(boxes.to(dtype), scores.to(dtype), idxs,
                          dict(type='nms', iou_threshold=0.5))
    assert dets.dtype == dtype and len(dets) > 0
    feats = torch.randn(1, 8, 32, 32)
    rois = torch.cat([torch.zeros(64, 1), boxes / 2], 1)
    out = RoIAlign(7, spatial_scale=1.0, sampling_ratio=0)(feats.to(dtype), rois.to(dtype))
    ref = RoIAlign(7, spatial_scale=1.0, sampling_ratio=0)(feats.to(dtype).float(),
                                                          rois.to(dtype).float())
    assert out.dtype == dtype and torch.allclose(out.float(), ref, atol=2e-2)
    wrapped = float32_unless_native(len)
    assert float32_unless_native(wrapped) is wrapped, 'wrapped twice'


def _build(config, scope: str):
    cfg = Config.fromfile(str(ROOT / config))
    init_default_scope(scope)
    if scope == 'mmseg':
        cfg.model.data_preprocessor.size = (128, 160)
    else:  # fewer proposals / RoIs, for speed
        cfg.model.train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=100)
        cfg.model.train_cfg.rcnn.sampler.num = 64
        cfg.model.test_cfg.rpn.update(nms_pre=50, max_per_img=20)
    model = MODELS.build(cfg.model)
    model.init_weights()
    return model


@pytest.mark.parametrize('config, scope', [(DET_DEMO, 'mmdet'), (SEG_DEMO, 'mmseg')],
                         ids=['maskrcnn', 'upernet'])
@pytest.mark.needs('mmdet', 'mmseg')
@float32_mmcv_ops()
def test_demo_models_train_and_predict_under_bf16_autocast(config, scope):
    model = _build(config, scope).train()
    batch = det_batch(4, with_mask=True) if scope == 'mmdet' else seg_batch(5)
    data = model.data_preprocessor(batch, True)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        losses = model(**data, mode='loss')
    total = sum(v if isinstance(v, torch.Tensor) else sum(v)
                for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        results = model(**model.data_preprocessor(batch, False), mode='predict')
    assert len(results) == len(batch['inputs'])

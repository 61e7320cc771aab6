"""Checks of the backbone contract shared by every family's test file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def check_registry_scopes(type_name: str, arch: Any, size=(64, 64)) -> list:
    """Builds from the root, mmdet, mmseg and mmpretrain registries; returns
    the output shapes of the last build.  Every output map is contiguous NCHW
    (mmcv's RoIAlign reads any input so: a channels-last map gives Mask R-CNN
    wrong RoI features); every stage's blocks get contiguous tokens."""
    from mmdet.registry import MODELS as DET
    from mmengine.registry import MODELS
    from mmpretrain.registry import MODELS as CLS
    from mmseg.registry import MODELS as SEG
    cls = MODELS.get(type_name)
    for registry in (MODELS, DET, SEG, CLS):
        model = registry.build(dict(type=type_name, arch=arch, out_indices=(3, )))
        assert type(model) is cls, registry.scope
    full = cls(arch=arch).eval()
    block_inputs = []
    for stage in full.stages:                    # tokens entering each stage's blocks
        stage.blocks[0].register_forward_pre_hook(
            lambda module, args: block_inputs.append(args[0].stride()))
    outs = full(torch.randn(1, 3, *size))
    assert len(outs) == 4 and all(o.is_contiguous() for o in outs), \
        [o.stride() for o in outs]
    # contiguous (B, N, C) tokens: channels innermost, so the blocks' token-map
    # convs take the channels-last path (DilateFormer's conv stem gives a view of NCHW)
    assert len(block_inputs) == 4 and all(s[-1] == 1 for s in block_inputs), block_inputs
    return [o.shape for o in model.eval()(torch.randn(1, 3, *size))]


def check_with_cp_same_gradients(cls, arch: Any, size=(64, 64), **kwargs) -> None:
    """Activation checkpointing changes memory, not gradients."""
    x = torch.randn(1, 3, *size)
    grads = []
    for with_cp in (False, True):
        torch.manual_seed(1)
        model = cls(arch, with_cp=with_cp, drop_path_rate=0., **kwargs)
        model.init_weights()
        model.train()
        sum(o.square().mean() for o in model(x)).backward()
        grads.append([p.grad for p in model.parameters()])
    assert any(g is not None for g in grads[0])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def check_official_roundtrip_and_detector_checkpoint(cls, arch: Any, converter, tmp_path: Path,
                                                     size=(64, 64), **kwargs):
    """ours -> official -> ours keeps the keys, and a whole-detector checkpoint
    (``state_dict`` with ``backbone.``) loads into an identical backbone.
    Returns the official state dict for family-specific checks."""
    model = cls(arch, **kwargs)
    model.init_weights()
    official = converter.ours_to_official(model.state_dict())
    assert converter.official_to_ours(official).keys() == model.state_dict().keys()
    path = tmp_path / 'detector.pth'
    torch.save({'state_dict': {'backbone.' + k: v for k, v in model.state_dict().items()},
                'meta': {}}, path)
    clone = cls(arch, init_cfg=dict(type='Pretrained', checkpoint=str(path)), **kwargs)
    clone.init_weights()
    x = torch.randn(1, 3, *size)
    model.eval(), clone.eval()
    for a, b in zip(model(x), clone(x)):
        assert torch.equal(a, b)
    return official

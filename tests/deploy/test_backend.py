"""onnxruntime as the backend of a model's dense part
(``vattn_mm/deploy/backend.py``): the export made once per weights and
found again by their hash, a changed weight or structure exported anew, a
cached file that does not match PyTorch refused and removed, and the model
with its backbone and neck in onnxruntime giving PyTorch's features for a
batch, its heads untouched."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from vattn_mm.deploy import (BackboneNeck, OnnxCheckError, OnnxFeatures, cached_export,
                             dense_part, use_onnxruntime, weights_key)
from vattn_mm.deploy.onnx import DEFAULT_OPSET

from ..backbone_cases import build_micro

pytest.importorskip('onnxruntime')

SMALL = dict(export_size=(64, 64), check_sizes=((64, 64), (77, 61)))


def stage_channels() -> list[int]:
    with torch.no_grad():
        return [m.shape[1] for m in build_micro('PVTv2')(torch.zeros(1, 3, 32, 32))]


class Lateral(nn.Module):
    """A neck: a 1x1 convolution to 4 channels per level, scaled."""

    def __init__(self, scale: float = 1.):
        super().__init__()
        torch.manual_seed(1)
        self.convs = nn.ModuleList(nn.Conv2d(c, 4, 1) for c in stage_channels())
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, maps):
        return tuple(conv(m) * self.scale for conv, m in zip(self.convs, maps))


class Detector(nn.Module):
    """The parts of an OpenMMLab model the backend looks at."""

    def __init__(self, neck: nn.Module | None):
        super().__init__()
        torch.manual_seed(0)
        self.backbone, self.neck = build_micro('PVTv2').eval(), neck
        self.head = nn.Conv2d(4, 2, 1)

    def extract_feat(self, images):
        maps = self.backbone(images)
        return maps if self.neck is None else self.neck(maps)


def test_export_is_made_once_per_weights(tmp_path):
    part = BackboneNeck(build_micro('PVTv2').eval(), Lateral())
    path, checks, exported = cached_export(part, tmp_path, **SMALL)
    assert exported and path.name == f'{weights_key(part, DEFAULT_OPSET)}.onnx'
    assert len(checks) == 2 * 4 and all(c.ok for c in checks)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]    # no partial file left
    again, _, exported = cached_export(part, tmp_path, **SMALL)
    assert again == path and not exported
    with torch.no_grad():
        part.neck.scale.fill_(2.)
    other, _, exported = cached_export(part, tmp_path, **SMALL)
    assert exported and other != path


def test_key_covers_structure_values_and_opset():
    a, b = build_micro('PVTv2'), build_micro('PVTv2')
    b.load_state_dict(a.state_dict())
    assert weights_key(a, 17) == weights_key(b, 17) != weights_key(a, 18)
    b.eval()        # the train flag is not part of the structure
    assert weights_key(a, 17) == weights_key(b, 17)
    assert weights_key(BackboneNeck(a, Lateral(1.)), 17) != weights_key(
        BackboneNeck(a, Lateral(-1.)), 17)
    assert weights_key(a, 17) != weights_key(BackboneNeck(a, nn.Identity()), 17)


def test_a_cached_file_that_does_not_match_is_refused_and_removed(tmp_path):
    part = BackboneNeck(build_micro('PVTv2').eval(), Lateral())
    path, _, _ = cached_export(part, tmp_path, **SMALL)
    wrong = BackboneNeck(part.backbone, Lateral(3.))
    other, _, _ = cached_export(wrong, tmp_path, **SMALL)
    other.replace(path)        # a stale or tampered file under the right name
    with pytest.raises(OnnxCheckError, match='does not match PyTorch') as error:
        cached_export(part, tmp_path, **SMALL)
    assert 'NO' in str(error.value) and not path.exists()
    assert cached_export(part, tmp_path, **SMALL)[2]        # made anew


@pytest.mark.parametrize('with_neck', [True, False], ids=['backbone+neck', 'backbone'])
def test_model_runs_its_dense_part_in_onnxruntime(with_neck, tmp_path):
    model = Detector(Lateral(0.5) if with_neck else None).eval()
    images = torch.randn(2, 3, 96, 80)
    with torch.no_grad():
        expected = model.extract_feat(images)
    head = model.head
    checks = use_onnxruntime(model, tmp_path, **SMALL)
    assert all(c.ok for c in checks)
    assert isinstance(model.backbone, OnnxFeatures) and model.neck is None
    assert model.head is head
    got = model.extract_feat(images)
    assert len(got) == len(expected) == 4
    for out, ref in zip(got, expected):
        assert out.shape == ref.shape
        assert (out - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_refusals():
    with pytest.raises(TypeError, match='no backbone'):
        dense_part(nn.Linear(2, 2))
    model = Detector(None)
    features = OnnxFeatures.__new__(OnnxFeatures)
    nn.Module.__init__(features)
    with pytest.raises(RuntimeError, match='runs on the CPU'):
        features(torch.empty(1, 3, 8, 8, device='meta'))
    model.to('meta')
    with pytest.raises(ValueError, match='runs on the CPU'):
        use_onnxruntime(model)

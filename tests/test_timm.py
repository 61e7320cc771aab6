"""vattn_mm.timm: the backbones as timm models (names, features, weights)."""
from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
import torch

from vattn_mm.backbones import CheckpointMismatchError, backbone_class
from vattn_mm.checkpoint.released import released_weights

from .backbone_cases import CASES
from .classifier_cases import CLASSIFIER_CASES, fixture_arch, official_logits
from .golden import assert_outputs_match, case_paths, load_fixture, write_released
from .http_server import FileServer

timm = pytest.importorskip('timm')
vattn_timm = pytest.importorskip('vattn_mm.timm')

RELEASED = {cls.family(): name for name, cls in ((n, backbone_class(n)) for n in CASES)
            if cls.converter is not None}


def model_name(family: str) -> str:
    """A registered timm model of ``family`` (the first by name)."""
    return min(name for name, (fam, _) in vattn_timm._VARIANTS.items() if fam == family)


def test_every_released_imagenet_record_has_a_tagged_model():
    tagged = set(timm.list_models('vattn_*', include_tags=True))
    records = released_weights(pretraining=True)
    assert len(tagged) == len(records)
    for record in records:
        name, _, arch = vattn_timm._variant(record)
        assert any(t.startswith(f'{name}.') for t in tagged), record.name
    assert all(n.startswith(vattn_timm.MODEL_PREFIX) for n in vattn_timm.model_names())
    assert {family for family, _ in vattn_timm._VARIANTS.values()} == set(RELEASED)


def test_names_do_not_clash_with_timm_own_models():
    import timm.models._registry as registry
    own = {n for n, fn in registry._model_entrypoints.items()
           if not fn.__module__.startswith('vattn_mm')}
    assert not own & set(vattn_timm.model_names())


def features_model(family: str, arch, out_indices, **kwargs):
    return timm.create_model(model_name(family), features_only=True, arch=arch,
                             out_indices=out_indices, drop_path_rate=0., **kwargs)


def assert_same_maps(features, backbone, sizes) -> None:
    for size in sizes:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            ours, ref = features.eval()(x), backbone.eval()(x)
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            assert torch.equal(a, b)


@pytest.mark.parametrize('name', sorted(RELEASED.values()))
@pytest.mark.parametrize('out_indices', [(0, 1, 2, 3), (1, 3)])
def test_features_only_gives_the_mmengine_maps(name, out_indices):
    case = CASES[name]
    family = backbone_class(name).family()
    features = features_model(family, case.micro, out_indices, **case.micro_kwargs)
    backbone = backbone_class(name)(case.micro, drop_path_rate=0., out_indices=out_indices,
                                    **case.micro_kwargs)
    sd = {k[len('backbone.'):]: v for k, v in features.model.state_dict().items()}
    missing, unexpected = backbone.load_state_dict(sd, strict=False)
    assert not unexpected
    # what the features model leaves out: output norms of stages it does not give
    assert all(k.split('.')[2] == 'norm' and int(k.split('.')[1]) not in out_indices
               for k in missing)
    h, w = case.micro_size
    assert_same_maps(features, backbone, [(h, w), (h + 5, w + 13)])
    assert features.feature_info.channels() == [backbone.out_channels[i] for i in out_indices]
    assert features.feature_info.reduction() == [backbone.strides[i] for i in out_indices]


FEATURE_CASES = [c for c in CLASSIFIER_CASES if c.values[1].stem in
                 {'micro_li', 'micro_sr_odd100x150', 'micro_B_clsfeatures', 'micro_a05',
                  'micro_srf', 'micro_lrf_convembed_odd100x150'}
                 or c.values[0] in {'p2t', 'dilateformer', 'agent_pvt', 'efficientvit'}]


@pytest.mark.parametrize('family,path', FEATURE_CASES)
def test_features_only_loads_a_release_as_the_mmengine_backbone(family, path, tmp_path):
    rec = load_fixture(path)
    src = write_released(rec, tmp_path)
    arch = fixture_arch(rec)
    features = features_model(family, arch, (0, 1, 2, 3), pretrained=True,
                              pretrained_cfg_overlay=dict(file=src))
    cls = backbone_class(family)
    backbone = cls(arch, drop_path_rate=0., init_cfg=dict(type='Pretrained', checkpoint=src))
    backbone.init_weights()
    assert features.model.state_dict().keys() == {
        f'backbone.{k}' for k in backbone.state_dict()}
    for key, value in backbone.state_dict().items():
        assert torch.equal(features.model.state_dict()[f'backbone.{key}'], value), key
    assert_same_maps(features, backbone, [tuple(rec['input'].shape[-2:])])


def classifier(family: str, rec: dict, src: str, **kwargs):
    return timm.create_model(model_name(family), arch=fixture_arch(rec), drop_path_rate=0.,
                             num_classes=rec['checkpoint'].get('head.weight', torch.empty(10))
                             .shape[0], pretrained=True,
                             pretrained_cfg_overlay=dict(file=src), **kwargs)


@pytest.mark.parametrize('family,path', CLASSIFIER_CASES)
def test_pretrained_classifier_gives_the_official_and_the_export_logits(family, path, tmp_path):
    from mmengine.registry import DefaultScope
    from vattn_mm.checkpoint.export import build_classifier, export_official
    rec = load_fixture(path)
    src = write_released(rec, tmp_path)
    model = classifier(family, rec, src).eval()
    with torch.no_grad():
        logits = model(rec['input'])
    assert_outputs_match([logits], [official_logits(family, rec)], tol=1e-5)
    export = export_official(src, family, fixture_arch(rec))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        exported = build_classifier(export.model, 'cpu')
    exported.load_state_dict(export.state_dict)
    with torch.no_grad():
        assert torch.equal(logits, exported.eval()(rec['input'], mode='tensor'))
    # the classifier's keys are the export's, less the output norms it never uses
    assert model.state_dict().keys() == export.state_dict.keys() - set(export.unused)
    model.train()
    model(rec['input']).sum().backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def test_a_release_that_does_not_fit_names_the_keys(tmp_path):
    rec = load_fixture(next(p for p in case_paths('litv2') if p.stem == 'micro_a05'))
    src = write_released(rec, tmp_path)
    arch = dict(fixture_arch(rec), depths=[2, 2, 1, 1])
    for features_only in (False, True):
        with pytest.raises(CheckpointMismatchError, match=r'missing keys.*stages\.1\.blocks\.1\.'):
            timm.create_model(model_name('litv2'), arch=arch, pretrained=True,
                              features_only=features_only, pretrained_cfg_overlay=dict(file=src))


def test_a_head_of_another_width_starts_fresh(tmp_path):
    rec = load_fixture(case_paths('pvtv2')[0])
    src = write_released(rec, tmp_path)
    model = timm.create_model(model_name('pvtv2'), arch=fixture_arch(rec), num_classes=7,
                              pretrained=True, pretrained_cfg_overlay=dict(file=src))
    assert model.get_classifier().out_features == 7
    ours = model.state_dict()
    released = classifier('pvtv2', rec, src).state_dict()
    assert all(torch.equal(ours[k], v) for k, v in released.items() if not k.startswith('head.'))


def test_an_ema_file_loads_the_model_weights_as_mmengine_does(tmp_path):
    """A DeiT-style release holds ``model`` and ``model_ema``; both loaders take ``model``."""
    rec = load_fixture(case_paths('pvtv2')[0])
    sd = rec['checkpoint']
    src = tmp_path / 'deit_style.pth'
    torch.save({'model': sd, 'model_ema': {k: v + 1 for k, v in sd.items()}}, src)
    arch = fixture_arch(rec)
    features = features_model('pvtv2', arch, (0, 1, 2, 3), pretrained=True,
                              pretrained_cfg_overlay=dict(file=str(src)))
    backbone = backbone_class('pvtv2')(arch, init_cfg=dict(type='Pretrained', checkpoint=str(src)))
    backbone.init_weights()
    for key, value in backbone.state_dict().items():
        assert torch.equal(features.model.state_dict()[f'backbone.{key}'], value), key
    model = classifier('pvtv2', rec, str(src))
    assert torch.equal(model.state_dict()['head.fc.weight'], sd['head.weight'])


def test_pretrained_from_a_url_goes_through_the_checked_download(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'hub'))
    rec = load_fixture(case_paths('pvtv2')[0])
    data = open(write_released(rec, tmp_path), 'rb').read()
    digest = hashlib.sha256(data).hexdigest()
    with FileServer() as server:
        server.files['/pvt_v2_micro.pth'] = data
        url = server.url('/pvt_v2_micro.pth')
        model = timm.create_model(model_name('pvtv2'), arch=fixture_arch(rec), num_classes=10,
                                  pretrained=True,
                                  pretrained_cfg_overlay=dict(url=f'{url}#sha256={digest}'))
        assert torch.equal(model.state_dict()['head.fc.weight'], rec['checkpoint']['head.weight'])
        server.files['/other.pth'] = data
        with pytest.raises(Exception, match='sha256'):
            timm.create_model(model_name('pvtv2'), arch=fixture_arch(rec), pretrained=True,
                              pretrained_cfg_overlay=dict(
                                  url=server.url('/other.pth') + '#sha256=' + '0' * 64))


def test_a_manual_release_says_where_to_get_it():
    record = next(r for r in released_weights(pretraining=True) if r.download == 'manual')
    name, _, _ = vattn_timm._variant(record)
    with pytest.raises(RuntimeError, match=r'manual download .*' + record.file):
        timm.create_model(f'{name}.{vattn_timm._tag(record)}', pretrained=True)


def test_hugging_face_backbones_give_the_mmengine_maps(tmp_path, monkeypatch):
    """transformers' ``AutoBackbone.from_pretrained(..., use_timm_backbone=True)``
    (which always loads weights; keyword arguments reach ``create_model``)
    and ``TimmBackbone`` wrap the features model: the MMEngine backbone's
    maps, keys under ``_backbone.model.``."""
    transformers = pytest.importorskip('transformers')
    from transformers.models.auto import auto_factory
    # AutoBackbone first asks the Hub whether the name is a repository there: it is not
    monkeypatch.setattr(auto_factory, 'hf_api', lambda: SimpleNamespace(repo_exists=lambda n: False))
    rec = load_fixture(case_paths('pvtv2')[0])
    src, arch, out_indices = write_released(rec, tmp_path), fixture_arch(rec), (1, 2, 3)
    auto = transformers.AutoBackbone.from_pretrained(
        'vattn_pvtv2_b0', use_timm_backbone=True, out_indices=out_indices, arch=arch,
        pretrained_cfg_overlay=dict(file=src))
    backbone = backbone_class('pvtv2')(arch, out_indices=out_indices,
                                       init_cfg=dict(type='Pretrained', checkpoint=src))
    backbone.init_weights()
    direct = transformers.TimmBackbone(
        transformers.TimmBackboneConfig(backbone='vattn_pvtv2_b0', out_indices=out_indices),
        arch=arch)
    prefix = '_backbone.model.backbone.'
    for wrapped in (auto, direct):
        sd = wrapped.state_dict()
        assert {k[len(prefix):] for k in sd if k.startswith(prefix)} == set(backbone.state_dict())
        assert len(sd) == len(backbone.state_dict())
        if wrapped is direct:
            backbone.load_state_dict({k[len(prefix):]: v for k, v in sd.items()})
        x = torch.randn(1, 3, *rec['input'].shape[-2:])
        with torch.no_grad():
            ours = wrapped.eval()(x).feature_maps
            ref = backbone.eval()(x)
        assert len(ours) == len(ref) == len(out_indices)
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))


def test_hugging_face_resets_batch_norm_statistics_and_a_reload_restores_them(tmp_path, monkeypatch):
    """transformers' ``TimmBackbone`` re-initialises every ``BatchNorm2d``'s
    running statistics (zeros / ones) after timm loaded the weights, timm's
    own models' too: docs/timm.md gives the reload that restores them. This
    fails once transformers keeps them, and the note goes."""
    transformers = pytest.importorskip('transformers')
    from transformers.models.auto import auto_factory
    monkeypatch.setattr(auto_factory, 'hf_api', lambda: SimpleNamespace(repo_exists=lambda n: False))
    backbone = backbone_class('efficientvit')('b0', out_indices=(1, 2, 3))
    with torch.no_grad():
        for _ in range(2):   # running statistics away from their initial zeros / ones
            backbone(torch.randn(2, 3, 64, 64))
    src = str(tmp_path / 'b0.pth')
    torch.save(backbone.state_dict(), src)
    auto = transformers.AutoBackbone.from_pretrained(
        'vattn_efficientvit_b0', use_timm_backbone=True, out_indices=(1, 2, 3),
        pretrained_cfg_overlay=dict(file=src))
    got, ref = dict(auto._backbone.model.backbone.named_buffers()), dict(backbone.named_buffers())
    means = [k for k in ref if k.endswith('running_mean')]
    assert means and all(not got[k].any() and ref[k].any() for k in means)
    auto._backbone.model.load_pretrained(src)
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        ours, theirs = auto.eval()(x).feature_maps, backbone.eval()(x)
    assert len(ours) == 3 and all(torch.equal(a, b) for a, b in zip(ours, theirs))

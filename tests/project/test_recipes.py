"""Every dense config with a published number reproduces the official run
behind it: its metafile record names the official config at a pinned commit
and that config's recipe (optimizer, schedule, batch, scales, ...), and the
config resolves to the same values except for the stated deviations, each
with its reason.  A deviation that stops being one fails too."""
import re

import pytest
import yaml
from mmengine.config import Config

from vattn_mm.checkpoint.released import released_weights
from vattn_mm.engine.recipe import KEYS, resolved_recipe, same_checkpoint

from .test_configs import ROOT, codebase, load_config

#: ``https://github.com/<owner>/<repo>/blob/<40-hex commit>/<path>.py``
OFFICIAL_CONFIG = re.compile(r'https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+\.py')
DENSE = [r for r in released_weights() if not r.pretraining]
AUDITED = [r for r in DENSE if r.official_config]


def _differs(ours, official) -> bool:
    """Values differ (floats by more than rounding: ``2e-4 / 1.4`` is the YAML's 0.000142...)."""
    if isinstance(ours, dict) and isinstance(official, dict):
        return ours.keys() != official.keys() or any(_differs(ours[k], official[k]) for k in ours)
    if isinstance(ours, list) and isinstance(official, list):
        return len(ours) != len(official) or any(map(_differs, ours, official))
    if isinstance(ours, float) and isinstance(official, (int, float)):
        return abs(ours - official) > 1e-12 * max(abs(official), 1e-300)
    return ours != official or type(ours) is not type(official) and not (
        isinstance(ours, (int, float)) and isinstance(official, (int, float)))


def _key_differs(key: str, ours, official) -> bool:
    if key == 'pretrained':
        return not same_checkpoint(ours, official)
    return _differs(ours, official)


def test_every_published_number_names_its_official_recipe():
    claims = [r for r in DENSE if r.metrics]
    assert claims
    unsourced = [r.name for r in claims if not r.official_config]
    assert not unsourced, f'records with a published number but no Official Config: {unsourced}'
    for r in AUDITED:
        assert OFFICIAL_CONFIG.fullmatch(r.official_config), (r.name, r.official_config)
        assert list(r.official_values) == list(KEYS), (r.name, sorted(set(KEYS) ^ set(
            r.official_values)))
        for key, why in r.deviations.items():
            assert key in KEYS and isinstance(why, str) and len(why) > 20, (r.name, key, why)


@pytest.mark.parametrize('record', [
    pytest.param(r, id=r.name, marks=pytest.mark.needs(codebase(ROOT / r.config)))
    for r in AUDITED])
def test_config_resolves_to_the_official_recipe(record):
    ours, official = resolved_recipe(load_config(ROOT / record.config)), record.official_values
    differ = {k for k in KEYS if _key_differs(k, ours[k], official[k])}
    unstated = {k: (ours[k], official[k]) for k in differ - set(record.deviations)}
    assert not unstated, (f'{record.config} differs from {record.official_config} '
                          f'(ours, official): {unstated}')
    stale = set(record.deviations) - differ
    assert not stale, f'{record.name}: stated deviations {sorted(stale)} are no longer deviations'


def test_metafiles_have_no_repeated_keys():
    """YAML keeps the last of two equal keys without a word: a record's
    recipe written twice would hide the first."""
    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node):
        keys = [loader.construct_object(k, deep=True) for k, _ in node.value]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        assert not repeated, f'{node.start_mark}: repeated keys {repeated}'
        return loader.construct_mapping(node, deep=True)
    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for path in sorted((ROOT / 'configs' / 'metafiles').glob('*.yml')):
        yaml.load(path.read_text(), Loader=Strict)


def test_differs_compares_values_not_spelling():
    assert not _differs(2e-4 / 1.4, 0.00014285714285714287)
    assert _differs(1e-4, 2e-4) and _differs({'a': 1}, {'b': 1}) and _differs([1, 2], [1])
    assert not _differs({'by': 'iter', 'power': 1.0}, {'by': 'iter', 'power': 1.0})
    assert _differs(None, 0.0) and not _differs(None, None) and _differs(True, 'true')
    assert not _differs({'a': 1, 'b': [0.5]}, {'b': [0.5], 'a': 1.0})


def test_same_checkpoint_compares_addresses_whole_and_local_paths_by_name():
    release = 'https://github.com/Tangshitao/QuadTreeAttention/releases/download/'
    assert same_checkpoint(release + 'QuadTreeAttention_cls/b2.pth',
                           release + 'QuadTreeAttention_cls/b2.pth')
    assert not same_checkpoint(release + 'QuadTreeAttention_cls/b2.pth',
                               release + 'QuadTreeAttention/b2.pth')
    assert not same_checkpoint('checkpoints/b2.pth', release + 'QuadTreeAttention/b2.pth')
    pvt = 'https://github.com/whai362/PVT/releases/download/v2/pvt_v2_b2.pth'
    assert same_checkpoint(pvt, 'pretrained/pvt_v2_b2.pth')
    assert same_checkpoint('checkpoints/p2t_base.pth', 'pretrained/p2t_base.pth')
    assert not same_checkpoint(pvt, 'pretrained/pvt_v2_b3.pth')
    assert same_checkpoint(None, None) and not same_checkpoint(None, 'pretrained/pvt_v2_b2.pth')
    assert not same_checkpoint(pvt, None)


def test_resolved_recipe_reads_what_a_config_sets(tmp_path):
    """The reader on a config written here: AMP, clipping, warm-up + poly,
    multi-scale training, AlignResize testing."""
    path = tmp_path / 'recipe.py'
    path.write_text('''
optim_wrapper = dict(type='AmpOptimWrapper', dtype='float16', clip_grad=dict(max_norm=35),
                     optimizer=dict(type='AdamW', lr=6e-5, weight_decay=0.01),
                     paramwise_cfg=dict(custom_keys=dict(norm=dict(decay_mult=0.))))
param_scheduler = [dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
                   dict(type='PolyLR', eta_min=0., power=1., begin=0, end=160000, by_epoch=False)]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=160000)
train_dataloader = dict(batch_size=2, dataset=dict(type='RepeatDataset', dataset=dict(pipeline=[
    dict(type='RandomResize', scale=(2048, 512), ratio_range=(0.5, 2.0)),
    dict(type='RandomCrop', crop_size=(512, 512))])))
test_dataloader = dict(dataset=dict(pipeline=[dict(type='AlignResize', scale=(2048, 512))]))
auto_scale_lr = dict(base_batch_size=16)
model = dict(backbone=dict(type='PVTv2', drop_path_rate=0.3, init_cfg=dict(
                 type='Pretrained', checkpoint='https://x/y/pvt_v2_b2.pth')),
             decode_head=dict(norm_cfg=dict(type='SyncBN')))
''')
    recipe = resolved_recipe(Config.fromfile(path))
    assert recipe == dict(
        optimizer='AdamW', lr=6e-5, weight_decay=0.01, betas=[0.9, 0.999],
        paramwise={'custom_keys': {'norm': {'decay_mult': 0.}}}, grad_clip=35, precision='fp16',
        schedule=dict(by='iter', length=160000, warmup_iters=1500, warmup_ratio=1e-6,
                      decay='poly', decay_begin=0, power=1., min_lr=0.),
        batch_per_gpu=2, base_batch_size=16, drop_path_rate=0.3, frozen_stages=-1,
        norm_eval=False, sync_bn=True, train_scale=[[2048, 512], [0.5, 2.0]],
        test_scale=[[2048, 512]], test_resize='AlignResize', crop_size=[512, 512],
        pretrained='https://x/y/pvt_v2_b2.pth')
    assert list(recipe) == list(KEYS)

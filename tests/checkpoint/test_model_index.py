"""The weights table: the model index (model-index.yml, configs/metafiles/)
agrees with the configs and docs/backbones.md, its checks catch bad records,
``released_weights`` reads it, configs pointing at release addresses build
without the network, and OpenMMLab's ``mim`` lists the models and trains a
demo config."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mmengine.config import Config

from vattn_mm.analysis.model_spec import strip_pretrained
from vattn_mm.backbones import registered_backbones
from vattn_mm.checkpoint.released import (ReleasedWeights, in_paper_terms, load_model_index,
                                          model_index_path, record_of_config, released_weights)

from ..tools import DEV_SCRIPTS, load_tool

#: slow (mim installs a wheel and trains a demo config)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
model_index = load_tool('model_index.py', DEV_SCRIPTS)
CLS_DEMO = 'configs/demo/pvtv2_b0_cls_demo.py'


@pytest.fixture(scope='module')
def records():
    return released_weights(index=ROOT / 'model-index.yml')


def test_model_index_agrees_with_configs_and_docs():
    assert model_index.all_problems() == []


def test_the_command_line_checks_the_index():
    proc = subprocess.run([sys.executable, '.dev_scripts/model_index.py', '--check'], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == f'model index OK: {len(released_weights())} records\n'


def test_every_backbone_is_a_registered_arch(records):
    families = registered_backbones()
    for r in records:
        family, _, arch = r.backbone.partition(':')
        assert family in families, r
        assert arch in families[family].arch_zoo, f'{r.name}: {family} has no arch {arch!r}'


def test_every_fragment_and_family_is_covered(records):
    """Each family has ImageNet records with published top-1 and dense records
    with published results; every fragment with a checkpoint loads a record."""
    for family in {r.family for r in records}:
        mine = [r for r in records if r.family == family]
        assert any(r.pretraining and r.weights for r in mine), family
        assert any(not r.pretraining for r in mine), family
    with_results = {r.family for r in records if r.metrics}
    assert with_results >= {'PVTv2', 'P2T', 'QuadTree', 'LITv2', 'FocalNet', 'AgentPVT',
                            'EfficientViT'}
    imagenet = [r for r in records if r.pretraining]
    for path in model_index.fragments():
        pretrained = model_index.fragment_info(path)[1]
        if pretrained is not None:
            assert model_index.loaded_record(pretrained, imagenet) is not None, path


def _index_copy(tmp_path, edit) -> Path:
    """The model index copied to ``tmp_path`` with ``edit(models_by_name)`` applied."""
    (tmp_path / 'configs' / 'metafiles').mkdir(parents=True)
    index = ROOT / 'model-index.yml'
    (tmp_path / 'model-index.yml').write_text(index.read_text())
    metafiles = {}
    for name in yaml.safe_load(index.read_text())['Import']:
        metafiles[name] = yaml.safe_load((ROOT / name).read_text())
    by_name = {m['Name']: m for data in metafiles.values() for m in data['Models']}
    edit(by_name)
    for name, data in metafiles.items():
        data['Models'] = [m for m in data['Models'] if m['Name'] in by_name]
        (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path / 'model-index.yml'


def test_checks_catch_bad_records(tmp_path):
    def edit(models):
        models['pvtv2_b0_in1k']['Weights'] = 'ftp://example.org/pvt_v2_b0.pth'
        models['pvtv2_b1_in1k']['Metadata']['File'] = 'other.pth'
        models['pvtv2_b3_in1k']['Metadata']['Download'] = 'somehow'
        models['litv2_s_in1k']['Results'][0]['Metrics']['Top 1 Accuracy'] = 820
        models['p2t_t_retinanet_coco']['Config'] = 'configs/p2t_t_nothing_coco.py'
        models['p2t_s_retinanet_coco']['Metadata']['Backbone'] = 'P2T:tiny'
        models['litv2_s_retinanet_coco']['Weights'] = 'https://github.com/ziplab/LITv2/'
        del models['litv2_s_retinanet_coco']['Metadata']['File']
        del models['pvtv2_b2_in1k']      # a fragment's and the mmpretrain config's record
        del models['litv2_m_fpn_ade20k']  # a config's record
    index = _index_copy(tmp_path, edit)
    collections, _ = load_model_index(index)
    recs = released_weights(index=index)
    found = '\n'.join(model_index.record_problems(recs, collections)
                      + model_index.fragment_problems(recs) + model_index.config_problems(recs)
                      + model_index.docs_problems(recs))
    for expected in ("pvtv2_b0_in1k: 'ftp://example.org/pvt_v2_b0.pth' is not an http(s) address",
                     "pvtv2_b1_in1k: File 'other.pth' but the address downloads 'pvt_v2_b1.pth'",
                     "pvtv2_b3_in1k: Download 'somehow' is not one of",
                     'litv2_s_in1k: Top 1 Accuracy = 820 is not a number in (0, 100]',
                     'p2t_t_retinanet_coco: config configs/p2t_t_nothing_coco.py does not exist',
                     'configs/p2t_t_retinanet_coco.py: 0 records in the model index',
                     'configs/p2t_s_retinanet_coco.py: builds P2T:small (its fragment), the record '
                     'p2t_s_retinanet_coco says P2T:tiny',
                     'litv2_s_retinanet_coco: the direct address https://github.com/ziplab/'
                     'LITv2/ names no file: give File',
                     'configs/_base_/backbones/pvtv2_b2.py: pretrained',
                     'configs/mmpretrain/pvtv2_b2_in1k.py: 0 records',
                     'configs/litv2_m_fpn_ade20k.py: 0 records',
                     'the weights table differs from the model index'):
        assert expected in found, f'{expected!r} not reported:\n{found}'


def test_a_local_path_for_a_direct_download_is_reported(records, tmp_path, monkeypatch):
    fragment = tmp_path / 'pvtv2_b2.py'
    text = (model_index.FRAGMENT_DIR / 'pvtv2_b2.py').read_text()
    url = next(r.weights for r in records if r.name == 'pvtv2_b2_in1k')
    fragment.write_text(text.replace(f"'{url}'", "'checkpoints/pvt_v2_b2.pth'"))
    monkeypatch.setattr(model_index, 'fragments', lambda: [fragment])
    monkeypatch.setattr(model_index, 'ROOT', tmp_path)
    problems = model_index.fragment_problems(records)
    assert problems == [f'pvtv2_b2.py: pvtv2_b2_in1k is a direct download: point pretrained at '
                        f'{url}']


def test_released_weights_reads_and_filters(records):
    # a checkout: its own index, or the editable install's .mim link to it
    assert model_index_path().resolve() == ROOT / 'model-index.yml'
    focal = released_weights('focalnet', pretraining=True)
    assert focal and all(r.family == 'FocalNet' and r.pretraining for r in focal)
    tiny = next(r for r in focal if r.name == 'focalnet_t_srf_in1k')
    assert tiny.metrics == {'Top 1 Accuracy': 82.1} and tiny.resolution == 224
    assert tiny.url_names_file and tiny.weights.endswith('/focalnet_tiny_srf.pth')
    dense = released_weights('PVTv2', pretraining=False)
    mrcnn = next(r for r in dense if r.name == 'pvtv2_b2_maskrcnn_coco')
    assert mrcnn.config == 'configs/pvtv2_b2_maskrcnn_coco.py'
    assert mrcnn.metrics == {'box AP': 45.3, 'mask AP': 41.2} and not mrcnn.url_names_file
    assert len(released_weights()) == len(records)
    with pytest.raises(ValueError, match=r"unknown family 'Swin'; the model index has \["):
        released_weights('Swin')
    manual = ReleasedWeights('x', 'P2T', 'P2T:tiny', 'Image Classification', 'ImageNet-1k',
                             weights='https://drive.google.com/file/d/abc/view', file='p.pth',
                             download='manual')
    assert not manual.url_names_file


def test_metrics_in_the_papers_terms():
    """tools/test.py's last line: the evaluator's keys under the papers'
    names and scale, beside the published number of the config's record."""
    record = record_of_config('/somewhere/configs/pvtv2_b2_maskrcnn_coco.py')
    assert record.name == 'pvtv2_b2_maskrcnn_coco'
    assert record.official_config.endswith('/detection/configs/mask_rcnn_pvt_v2_b2_fpn_1x_coco.py')
    metrics = {'coco/bbox_mAP': 0.451, 'coco/segm_mAP': 0.41, 'coco/bbox_mAP_50': 0.67}
    assert in_paper_terms(metrics, record) == ('box AP 45.1 (published 45.3), '
                                               'mask AP 41.0 (published 41.2)')
    assert in_paper_terms({'mIoU': 47.123, 'aAcc': 80.}) == 'mIoU 47.1'
    assert record_of_config('configs/demo/pvtv2_b0_maskrcnn_demo.py') is None
    assert in_paper_terms({'loss': 1.}) == ''


def test_url_fragments_build_without_the_network(records, monkeypatch):
    """A config whose fragment points at a release address keeps it in
    init_cfg; strip_pretrained (what the config tests build) drops it, and
    building never opens a connection."""
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError(f'a connection was opened: {args}')
    monkeypatch.setattr(socket, 'create_connection', no_network)
    cfg = Config.fromfile(str(ROOT / 'configs/pvtv2_b0_retinanet_coco.py'))
    url = next(r.weights for r in records if r.name == 'pvtv2_b0_in1k')
    assert cfg.model.backbone.init_cfg.checkpoint == url
    stripped = strip_pretrained(cfg.model.to_dict())
    assert stripped['backbone']['init_cfg'] is None
    from mmengine.registry import MODELS
    MODELS.build(stripped['backbone']).init_weights()


#: what the wheel is built from (a copy: stale build/ folders of the checkout stay out)
WHEEL_SOURCES = ('vattn_mm', 'configs', 'tools', 'setup.py', 'README.md', 'requirements.txt',
                 'model-index.yml', 'LICENSE')


@pytest.fixture(scope='module')
def wheel_site(tmp_path_factory):
    """vattn-mm built as a wheel and installed into ``site/``: the package with
    its ``.mim`` copies of configs/, tools/ and model-index.yml, as pip installs
    it for a user (mim finds an installed package's files at
    ``site-packages/vattn_mm/.mim``)."""
    if importlib.util.find_spec('mim') is None:
        pytest.fail('openmim is not installed (tools/install.sh installs openmim without its '
                    'dependencies: docs/install.md)')
    tmp = tmp_path_factory.mktemp('wheel')
    ignore = shutil.ignore_patterns('__pycache__', '.mim', '*.egg-info')
    for name in WHEEL_SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tmp / 'src' / name, ignore=ignore)
        elif src.is_file():
            shutil.copy2(src, tmp / 'src' / name)
    pip = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '--no-input', '-q']
    _run(pip + ['wheel', '--no-deps', '--no-build-isolation', '--no-index', '-w', 'dist',
                tmp / 'src'], tmp)
    wheel, = (tmp / 'dist').glob('vattn_mm-*.whl')
    _run(pip + ['install', '--no-deps', '--no-index', '--target', 'site', str(wheel)], tmp)
    mim = tmp / 'site' / 'vattn_mm' / '.mim'
    assert (mim / 'model-index.yml').is_file() and (mim / 'tools' / 'train.py').is_file()
    assert (mim / 'configs' / 'metafiles' / 'pvtv2.yml').is_file()
    (tmp / 'run').mkdir()
    return tmp


def _run(cmd: list, cwd: Path, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f'{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}'
    return proc


def _mim(site: Path, *args) -> subprocess.CompletedProcess:
    """``python -m mim ARGS`` run from ``run/`` with the installed wheel first on the path."""
    env = dict(os.environ, PYTHONPATH=str(site / 'site'), OMP_NUM_THREADS='1')
    return _run([sys.executable, '-m', 'mim', *args], site / 'run', env)


def test_mim_search_lists_the_models_with_their_numbers(wheel_site, records):
    _mim(wheel_site, 'search', 'vattn-mm', '--json', 'search.json')
    table = json.loads((wheel_site / 'run' / 'search.json').read_text())
    assert len(table['model']) == len(records)
    assert set(table['model'].values()) == {r.family.lower() for r in records}
    assert set(table['config'].values()) >= {r.config for r in records if r.config}
    assert table['coco/box_ap']['pvtv2_b2_maskrcnn_coco'] == 45.3
    assert table['coco/mask_ap']['pvtv2_b2_maskrcnn_coco'] == 41.2
    assert table['ade20k/miou']['focalnet_t_lrf_upernet_ade20k'] == 46.8
    assert table['imagenet-1k/top_1_accuracy']['efficientvit_b1_in1k'] == 79.39
    assert table['weight']['pvtv2_b2_in1k'] == next(
        r.weights for r in records if r.name == 'pvtv2_b2_in1k')


def test_mim_train_runs_a_demo_config(wheel_site, demo_data):
    """``mim train vattn-mm pvtv2_b0_cls_demo.py`` on the CPU: mim finds the
    config in the package's .mim/configs and runs its .mim/tools/train.py, one
    iteration of the classification demo (one epoch of one batch, the cosine
    schedule from the start)."""
    work = wheel_site / 'run' / 'work'
    options = [f'{loader}.{key}' for loader in ('train_dataloader', 'val_dataloader',
                                                'test_dataloader')
               for key in (f'dataset.data_root={demo_data}/cls', 'num_workers=0',
                           'persistent_workers=False')]
    proc = _mim(wheel_site, 'train', 'vattn-mm', Path(CLS_DEMO).name, '--gpus', 0,
                '--launcher', 'none', '--work-dir', work, '--cfg-options', *options,
                'train_dataloader.batch_size=64', 'train_cfg.max_epochs=1',
                'param_scheduler.1.begin=0', 'default_hooks.checkpoint.interval=1',
                'default_hooks.logger.interval=1')
    installed = wheel_site / 'site' / 'vattn_mm' / '.mim'
    assert f'{installed}/tools/train.py {installed}/configs/demo/pvtv2_b0_cls_demo.py' in \
        proc.stdout, proc.stdout[-2000:]
    assert (work / 'epoch_1.pth').is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert 'Epoch(train) [1][1/1]' in proc.stdout + proc.stderr

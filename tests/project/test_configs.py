"""Every config in configs/ builds its model and runs forward + backward on a
small CPU input (the pretrained checkpoint is not needed for that), and takes
its backbone from one fragment in configs/_base_/backbones/.  A released
variant's backbone has one block a stage here: its widths, so the wiring of
neck and heads, stay what the config builds, and every variant is built at
full depth against its official key list in tests/backbones.  Where the
codebase a config needs (mmdet, mmseg, mmpretrain) is not installed, its
backbone fragment builds and trains a step instead and the config's
requirement error names the extra to install.  ``make test`` trains one config
of each recipe (family and inherited files); the family's other variants in
that recipe, and the heads' configs that tests/heads trains at full depth,
are ``extended``."""
import ast
import functools
import os
import re
from pathlib import Path

import pytest
import torch
from mmengine.config import Config, ConfigDict
from mmengine.registry import DefaultScope, init_default_scope
from mmengine.structures import PixelData

from vattn_mm.analysis.model_spec import strip_pretrained
from vattn_mm.utils.requires import MissingPackageError, require_config_scope

from ..conftest import FULL_STACK_ENV, missing

#: slow (every config builds its model and trains one step)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# configs/_base_/ holds recipe fragments that the family configs inherit
CONFIGS = sorted(p for p in (ROOT / 'configs').rglob('*.py') if '_base_' not in p.parts)
FRAGMENT_DIR = ROOT / 'configs' / '_base_' / 'backbones'
# one fragment per variant; <family>_common.py holds what a family's fragments share
FRAGMENTS = sorted(p for p in FRAGMENT_DIR.glob('*.py') if not p.stem.endswith('_common'))


def _local_bases(path: Path) -> list:
    """The files in configs/ that ``path`` inherits, directly or not
    (upstream ``package::`` bases left out)."""
    bases = []
    for node in ast.parse(path.read_text()).body:
        targets = [getattr(t, 'id', None) for t in getattr(node, 'targets', ())]
        if targets == ['_base_']:
            names = ast.literal_eval(node.value)
            for name in [names] if isinstance(names, str) else names:
                if '::' not in name:
                    base = (path.parent / name).resolve()
                    bases += [base] + _local_bases(base)
    return bases


def codebase(path: Path) -> str:
    """The OpenMMLab codebase whose bases (``package::``) ``path`` inherits."""
    for file in [path, *_local_bases(path)]:
        found = re.search(r"\b(mmdet|mmseg|mmpretrain)::", file.read_text())
        if found:
            return found.group(1)
    raise AssertionError(f'{path}: inherits no mmdet / mmseg / mmpretrain base')


def _backbone_type(path: Path) -> str:
    """The ``type`` of the ``backbone = dict(...)`` that ``path`` or a file
    it inherits assigns."""
    for file in [path, *_local_bases(path)]:
        for node in ast.parse(file.read_text()).body:
            if [getattr(t, 'id', None) for t in getattr(node, 'targets', ())] == ['backbone']:
                for keyword in getattr(node.value, 'keywords', ()):
                    if keyword.arg == 'type':
                        return ast.literal_eval(keyword.value)
    raise AssertionError(f'{path}: no backbone type found')


def _recipe(path: Path) -> tuple:
    """What a config builds apart from its variant: the backbone family and
    the files it inherits other than the variant's fragment."""
    fragments = set(FRAGMENTS)
    return (_backbone_type(path),
            *sorted(base.stem for base in _local_bases(path) if base not in fragments))


#: the configs of the modern heads: tests/heads/test_heads.py trains each at full depth
#: and predicts with it
HEAD_CONFIGS = [
    'pvtv2_b2_cascade_maskrcnn_3x_coco.py',
    'focalnet_t_srf_cascade_maskrcnn_3x_coco.py',
    'focalnet_t_lrf_cascade_maskrcnn_3x_coco.py',
    'litv2_s_cascade_maskrcnn_3x_coco.py',
    'pvtv2_b2_atss_3x_coco.py',
    'pvtv2_b2_gfl_3x_coco.py',
    'focalnet_t_lrf_dino_4scale_12e_coco.py',
    'pvtv2_b2_dino_4scale_12e_coco.py',
    'pvtv2_b2_mask2former_ade20k.py',
    'focalnet_t_lrf_mask2former_ade20k.py',
]


def _by_codebase(paths: list, repeats_extended: bool = False) -> list:
    """One param a config (one worker a config: its tests share its parsed
    file, load_config).  ``repeats_extended``: a config whose recipe an earlier
    one has, with another variant of the family, or that tests/heads trains,
    is marked ``extended``."""
    params, recipes = [], set()
    for path in paths:
        marks = [pytest.mark.needs(codebase(path)), pytest.mark.xdist_group(_config_id(path))]
        if repeats_extended:
            recipe = _recipe(path)
            if recipe in recipes or _config_id(path) in HEAD_CONFIGS:
                marks.append(pytest.mark.extended)
            recipes.add(recipe)
        params.append(pytest.param(path, id=_config_id(path), marks=marks))
    return params


@pytest.fixture(scope='module', autouse=True)
def _upstream_metafiles_read_once():
    """For every upstream base (``mmdet::...``) of a config, mmengine first
    looks for an experiment of that name in every metafile of the package,
    about 90 YAML files (half a second), before it takes the path as a base
    file; the configs here name a few dozen such bases, each many times.  In
    this module each metafile is parsed once (mmengine only reads what it
    parsed; the files are the installed package's)."""
    from mmengine.config import utils
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(utils, 'load', functools.lru_cache(maxsize=None)(utils.load))
        yield


@functools.lru_cache(maxsize=None)
def load_config(path: Path) -> Config:
    """``Config.fromfile``, once per file."""
    return Config.fromfile(str(path))


def _config_id(path: Path) -> str:
    return str(path.relative_to(ROOT / 'configs'))


def det_batch(num_classes: int, with_mask: bool):
    from mmdet.testing import demo_mm_inputs
    return demo_mm_inputs(batch_size=1, image_shapes=[(3, 128, 160)], num_items=[3],
                          num_classes=num_classes, with_mask=with_mask)


def det_num_classes(model_cfg: dict) -> int:
    """The classes of a detector's box head (Cascade R-CNN's: one head a stage)."""
    head = (model_cfg.get('roi_head') or {}).get('bbox_head') or model_cfg['bbox_head']
    return (head[0] if isinstance(head, list) else head)['num_classes']


def det_with_mask(model_cfg: dict) -> bool:
    return 'mask_head' in (model_cfg.get('roi_head') or {})


def cpu_budget(model_cfg: dict) -> dict:
    """``model_cfg`` made cheap enough for a CPU step at 128x160: a two-stage detector
    with 32 proposals, 32 sampled RoIs a stage and 10 detections instead of 1000-2000,
    512 and 100 (Cascade R-CNN's 4-conv box heads on 512 RoIs x 3 stages and the mask
    head on 100 detections are most of a CPU step otherwise), DINO with 100 queries
    instead of 900 (more than the 426 encoder tokens of a 128x160 input); other models
    unchanged."""
    train, test = model_cfg.get('train_cfg') or {}, model_cfg.get('test_cfg') or {}
    for proposals in (train.get('rpn_proposal'), test.get('rpn')):
        if proposals:
            proposals.update(nms_pre=128, max_per_img=32)
    rcnn = train.get('rcnn') or []
    for stage in rcnn if isinstance(rcnn, list) else [rcnn]:
        stage['sampler']['num'] = 32
    if 'rcnn' in test:
        test['rcnn']['max_per_img'] = 10
    if model_cfg.get('type') == 'DINO':
        model_cfg['num_queries'] = 100
    return model_cfg


def one_block_a_stage(model_cfg: dict) -> dict:
    """The backbone of ``model_cfg`` with one block a stage where its arch is a
    released variant with per-stage ``depths``.  The widths, so the neck's
    ``in_channels``, and ``with_cp`` stay what the config builds; the full
    architectures are built and checked against the official key lists in
    tests/backbones.  (The sharded configs' variants, configs/_base_/fsdp.py,
    take minutes and GBs for one full-size CPU step.)"""
    from mmengine.registry import MODELS
    backbone = model_cfg['backbone']
    if isinstance(backbone['arch'], str):
        arch = MODELS.get(backbone['type']).arch_zoo[backbone['arch']]
        if 'depths' in arch:
            backbone['arch'] = dict(arch, depths=[1] * len(arch['depths']))
    return model_cfg


def seg_batch(num_classes: int, batch_size: int = 2):
    """Two images (UperNet's pyramid pooling has BatchNorm over 1x1 maps), each map four
    64x80 regions of random classes (Mask2Former matches a mask a class present)."""
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(batch_size):
        sample = SegDataSample(metainfo=dict(img_shape=(128, 160), ori_shape=(128, 160),
                                             pad_shape=(128, 160)))
        regions = torch.randint(0, num_classes, (2, 2))
        seg_map = regions.repeat_interleave(64, dim=0).repeat_interleave(80, dim=1)
        sample.gt_sem_seg = PixelData(data=seg_map[None])
        samples.append(sample)
    return dict(inputs=[torch.randint(0, 255, (3, 128, 160), dtype=torch.uint8)
                        for _ in range(batch_size)],
                data_samples=samples)


def _cls_batch(num_classes: int):
    from mmpretrain.structures import DataSample
    sample = DataSample().set_gt_label(torch.tensor([num_classes - 1]))
    return dict(inputs=[torch.randint(0, 255, (3, 96, 96), dtype=torch.uint8)],
                data_samples=[sample])


@pytest.mark.parametrize('path', _by_codebase(CONFIGS, repeats_extended=True))
def test_config_builds_and_trains_one_step(path):
    cfg = load_config(path)
    scope = cfg.get('default_scope', 'mmdet')
    with DefaultScope.overwrite_default_scope(scope):
        init_default_scope(scope)
        from mmengine.registry import MODELS
        model_cfg = one_block_a_stage(cpu_budget(strip_pretrained(cfg.model.to_dict())))
        if 'data_preprocessor' in model_cfg and 'size' in model_cfg['data_preprocessor']:
            model_cfg['data_preprocessor']['size'] = (128, 160)
        model = MODELS.build(ConfigDict(model_cfg))
        model.init_weights()
        model.train()
        if scope == 'mmdet':
            batch = det_batch(det_num_classes(model_cfg), with_mask=det_with_mask(model_cfg))
        elif scope == 'mmseg':
            batch = seg_batch(model_cfg['decode_head']['num_classes'])
        else:
            batch = _cls_batch(model_cfg['head']['num_classes'])
        data = model.data_preprocessor(batch, True)
        if scope == 'mmdet':
            # what the heads get must be contiguous NCHW: mmcv's RoIAlign reads any map so
            # (channels-last backbone maps made the FPN's outputs channels-last for batches
            # of square images, and Mask R-CNN trained on scrambled RoI features)
            with torch.no_grad():
                feats = model.extract_feat(torch.randn(2, 3, 128, 128))
            assert all(f.is_contiguous() for f in feats), [f.stride() for f in feats]
        losses = model(**data, mode='loss')
        total = sum(v if isinstance(v, torch.Tensor) else sum(v)
                    for k, v in losses.items() if 'loss' in k)
        assert torch.isfinite(total), losses
        total.backward()
        grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
        assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize('path', _by_codebase(CONFIGS))
def test_backbone_comes_from_one_fragment(path):
    fragments = set(_local_bases(path)) & set(FRAGMENTS)
    assert len(fragments) == 1, f'backbone fragments inherited: {sorted(map(str, fragments))}'
    fragment = load_config(fragments.pop())
    cfg = load_config(path)
    built = cfg.model.backbone
    assert built.type == fragment.backbone.type
    # the fragment chooses the variant; an arch dict is a reduced (demo) or ImageNet layout
    assert built.arch == fragment.backbone.arch or isinstance(built.arch, dict)
    assert cfg.backbone == fragment.backbone and cfg.backbone_channels == fragment.backbone_channels


def test_no_config_copies_a_fragment():
    """No file in configs/ but the fragments names a backbone type, and none
    restates the output channels of a fragment it inherits (reduced demo
    backbones have their own, which may equal another family's)."""
    fragments = {p: load_config(p) for p in FRAGMENTS}
    assert fragments
    types = {f.backbone.type for f in fragments.values()}
    type_pattern = re.compile(r"type=['\"](%s)['\"]" % '|'.join(map(re.escape, types)))
    copies = []
    for p in sorted((ROOT / 'configs').rglob('*.py')):
        if p.parent == FRAGMENT_DIR:
            continue
        text = p.read_text()
        copies += [f'{_config_id(p)}: {m.group(0)}' for m in type_pattern.finditer(text)]
        inherited = [fragments[b] for b in _local_bases(p) if b in fragments]
        copies += [f'{_config_id(p)}: {f.backbone_channels}' for f in inherited
                   if str(f.backbone_channels) in text]
    assert not copies, copies


def test_codebases_of_the_configs_here():
    """Where a codebase is missing its configs' backbones are checked below;
    with every codebase installed the full configs are (above)."""
    assert {codebase(p) for p in CONFIGS} == {'mmdet', 'mmseg', 'mmpretrain'}


@pytest.mark.parametrize('fragment', FRAGMENTS, ids=lambda p: p.stem)
def test_backbone_fragment_builds_and_trains_where_its_codebase_is_missing(fragment):
    """Every config's backbone, from its fragment, in an environment without
    the codebase of some config (mmcv-lite: no mmdet / mmseg)."""
    users = [p for p in CONFIGS if fragment in _local_bases(p)]
    lacking = sorted({codebase(p) for p in users if missing(codebase(p))})
    if os.environ.get(FULL_STACK_ENV) or not lacking:
        pytest.skip('every config using this fragment builds in full '
                    '(test_config_builds_and_trains_one_step)')
    from mmengine.registry import MODELS
    backbone_cfg = one_block_a_stage(dict(
        backbone=strip_pretrained(load_config(fragment).backbone.to_dict())))['backbone']
    backbone = MODELS.build(ConfigDict(backbone_cfg))
    backbone.init_weights()
    backbone.train()
    outs = backbone(torch.randn(1, 3, 64, 64))
    sum(out.float().mean() for out in outs).backward()
    grads = [p.grad for p in backbone.parameters() if p.requires_grad]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)
    with pytest.raises(MissingPackageError, match=r"pip install 'vattn-mm\[(det|seg)\]'|mmcv's "
                                                  'compiled ops'):
        require_config_scope({'default_scope': lacking[0]})

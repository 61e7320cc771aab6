"""The configs of the modern heads (Cascade Mask R-CNN 3x, ATSS / GFL 3x, DINO
4-scale, Mask2Former) build their models, take one optimizer step of their
own recipe (optimizer, clipping, parameter groups) on a small CPU batch with
boxes and masks / a segmentation map, and predict; and
NormDecayOptimWrapperConstructor keeps every norm free of weight decay."""
from pathlib import Path

import pytest
import torch
from mmengine.config import ConfigDict
from mmengine.optim import DefaultOptimWrapperConstructor, build_optim_wrapper
from mmengine.registry import DefaultScope, init_default_scope
from torch import nn

from vattn_mm.analysis.model_spec import strip_pretrained
from vattn_mm.engine import NormDecayOptimWrapperConstructor

from ..project.test_configs import (HEAD_CONFIGS, cpu_budget, det_batch, det_num_classes,
                                   det_with_mask, load_config, seg_batch)

#: slow (full detection and segmentation heads each take an optimizer step)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
INPUT = (128, 160)


def _build(cfg):
    from mmengine.registry import MODELS
    model_cfg = cpu_budget(strip_pretrained(cfg.model.to_dict()))
    if 'size' in model_cfg.get('data_preprocessor', {}):
        model_cfg['data_preprocessor']['size'] = INPUT
    model = MODELS.build(ConfigDict(model_cfg))
    model.init_weights()
    return model, model_cfg


def _batch(scope: str, model_cfg: dict) -> dict:
    if scope == 'mmdet':
        return det_batch(det_num_classes(model_cfg), with_mask=det_with_mask(model_cfg))
    return seg_batch(model_cfg['decode_head']['num_classes'])


def _total_loss(losses: dict) -> torch.Tensor:
    return sum(v if isinstance(v, torch.Tensor) else sum(v)
               for k, v in losses.items() if 'loss' in k)


def _here(optim_wrapper: dict) -> dict:
    """The config's optimizer wrapper, or on a machine without a GPU, where
    mmengine refuses ``AmpOptimWrapper``, the same optimizer in an
    ``OptimWrapper`` (the same update; autocast on the CPU is tested in
    tests/engine/test_amp.py)."""
    if optim_wrapper.get('type') != 'AmpOptimWrapper' or torch.cuda.is_available():
        return optim_wrapper
    plain = {k: v for k, v in optim_wrapper.items() if k not in ('dtype', 'loss_scale')}
    return dict(plain, type='OptimWrapper')


@pytest.mark.parametrize('name', HEAD_CONFIGS)
def test_head_config_trains_one_step_and_predicts(name):
    cfg = load_config(ROOT / 'configs' / name)
    scope = cfg.default_scope
    with DefaultScope.overwrite_default_scope(scope):
        init_default_scope(scope)
        model, model_cfg = _build(cfg)
        optim_wrapper = build_optim_wrapper(model, _here(cfg.optim_wrapper))
        before = [p.detach().clone() for p in model.backbone.parameters()]

        model.train()
        data = model.data_preprocessor(_batch(scope, model_cfg), True)
        total = _total_loss(model(**data, mode='loss'))
        assert torch.isfinite(total), name
        optim_wrapper.update_params(total)
        moved = [not torch.equal(a, p) for a, p in zip(before, model.backbone.parameters())]
        assert any(moved), 'the optimizer step left the backbone unchanged'

        model.eval()
        with torch.no_grad():
            data = model.data_preprocessor(_batch(scope, model_cfg), False)
            result = model(**data, mode='predict')[0]
    if scope == 'mmdet':
        pred = result.pred_instances
        assert pred.bboxes.shape[1:] == (4, ) and len(pred.scores) == len(pred.labels)
        assert torch.isfinite(pred.bboxes).all()
        if det_with_mask(model_cfg):
            assert tuple(pred.masks.shape[1:]) == INPUT
    else:
        assert tuple(result.pred_sem_seg.data.shape) == (1, *INPUT)


def test_dino_feeds_three_stages_and_one_extra_level():
    """DINO-4scale: the last three stage maps plus the ChannelMapper's stride-2 conv."""
    cfg = load_config(ROOT / 'configs' / 'pvtv2_b2_dino_4scale_12e_coco.py')
    assert cfg.model.backbone.out_indices == (1, 2, 3)
    assert cfg.model.neck.in_channels == cfg.backbone_channels[1:]
    assert cfg.model.neck.num_outs == cfg.model.encoder.layer_cfg.self_attn_cfg.num_levels == 4


def test_mask2former_recipe_param_groups():
    """Mask2Former: backbone lr x0.1, no weight decay on any norm (backbone ones too) nor on
    the query / level embeddings, decay on the rest."""
    cfg = load_config(ROOT / 'configs' / 'pvtv2_b2_mask2former_ade20k.py')
    with DefaultScope.overwrite_default_scope('mmseg'):
        init_default_scope('mmseg')
        model, _ = _build(cfg)
        optimizer = build_optim_wrapper(model, cfg.optim_wrapper).optimizer
    base_lr, base_wd = cfg.optim_wrapper.optimizer.lr, cfg.optim_wrapper.optimizer.weight_decay
    names = {id(p): n for n, p in model.named_parameters()}
    settings = {names[id(g['params'][0])]: (g['lr'], g['weight_decay'])
                for g in optimizer.param_groups}
    assert settings['backbone.stages.0.blocks.0.norm1.weight'] == (base_lr * 0.1, 0.0)
    assert settings['backbone.stages.3.norm.bias'] == (base_lr * 0.1, 0.0)
    assert settings['backbone.stages.0.blocks.0.attn.q.weight'] == (base_lr * 0.1, base_wd)
    assert settings['decode_head.query_embed.weight'] == (base_lr, 0.0)
    assert settings['decode_head.level_embed.weight'] == (base_lr, 0.0)
    norms = [n for n in settings if n.startswith('decode_head.') and '.norms.' in n]
    assert norms and all(settings[n] == (base_lr, 0.0) for n in norms)
    assert settings['decode_head.cls_embed.weight'] == (base_lr, base_wd)


def test_norm_decay_reaches_norms_under_custom_keys():
    model = nn.Module()
    model.backbone = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    model.head = nn.Sequential(nn.Linear(4, 4), nn.GroupNorm(2, 4), nn.BatchNorm1d(4))
    paramwise_cfg = dict(custom_keys={'backbone': dict(lr_mult=0.1)}, norm_decay_mult=0.0)

    def groups(constructor):
        wrapper_cfg = dict(type='OptimWrapper',
                           optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.5))
        wrapper = constructor(wrapper_cfg, paramwise_cfg)(model)
        names = {id(p): n for n, p in model.named_parameters()}
        return {names[id(g['params'][0])]: (g['lr'], g['weight_decay'])
                for g in wrapper.optimizer.param_groups}

    ours = groups(NormDecayOptimWrapperConstructor)
    assert ours['backbone.1.weight'] == ours['backbone.1.bias'] == (0.1, 0.0)
    assert ours['backbone.0.weight'] == (0.1, 0.5)
    assert ours['head.1.weight'] == ours['head.2.bias'] == (1.0, 0.0)
    assert ours['head.0.weight'] == (1.0, 0.5)
    # mmengine's constructor leaves the backbone norm's decay on (the custom key wins) and
    # agrees on every other parameter
    default = groups(DefaultOptimWrapperConstructor)
    assert default['backbone.1.weight'] == default['backbone.1.bias'] == (0.1, 0.5)
    assert {k: v for k, v in ours.items() if not k.startswith('backbone.1.')} \
        == {k: v for k, v in default.items() if not k.startswith('backbone.1.')}

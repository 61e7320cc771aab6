"""The golden classifier cases: official ImageNet classifiers formed from
the golden fixtures, and their logits (what the mmpretrain export and the
timm models must give).

Every official
classifier is ``head(mean over tokens of final_norm(last-stage tokens))``
(whai362/PVT ``classification/pvt_v2.py`` and QuadTreeAttention
``classification/quadtree.py``: ``norm4`` then ``x.mean(dim=1)``; yuhuan-wu/P2T
``p2t.py``: ``torch.mean(x, dim=1)`` of the raw stage-4 tokens; ziplab/LITv2
``classification/models/litv2.py``, microsoft/FocalNet ``classification/
focalnet.py`` and dilateformer ``models/dilateformer.py``: ``self.norm`` (LN)
then ``AdaptiveAvgPool1d(1)``), so the reference per family is, with
``outputs[3]`` the fixture's stride-32 features (golden README):

* pvtv2, quadtree: ``outputs[3]`` is the ``norm4`` output -> ``head(mean(outputs[3]))``;
  for QuadTree only ``micro_B_clsfeatures`` holds classification-model features
  (the ``*_det`` cases use the dense ReLU / top-k settings).
* p2t: ``outputs[3]`` are the raw stage-4 tokens (no norm) -> ``head(mean(outputs[3]))``.
* litv2, focalnet: ``outputs[3]`` = a fresh LayerNorm (weight 1, bias 0, eps 1e-5,
  the eps of the classifier's ``norm``) of the stage-4 tokens, which the README
  states equal the classification model's (FocalNet: checked bit-exact), so the
  classifier's ``norm`` output is ``outputs[3] * norm.weight + norm.bias``.
  Not used: the odd-size LITv2 case (the dense code pads the image, the
  classifier has a fixed input resolution) and FocalNet's conv-embed case (dense
  stem padding 3 and input padding vs classification padding 2).
* dilateformer: ``outputs[3]`` are the classifier's own stage-4 block outputs ->
  ``head(mean(layer_norm(outputs[3], norm.weight, norm.bias, eps=1e-6)))``.
* agent_pvt: the classifier (LeapLabTHU/Agent-Attention ``agent_transformer/models/
  agent_pvt.py``) mean-pools the raw stage-4 tokens (no norm), but pools its
  queries to the training agent grids (sqrt(agent_num) squared), where the
  fixture's dense outputs use the detection grids 12x12 ... 28x28; the stage-4
  tokens are therefore our dense backbone's (checked against the fixtures in
  test_backbones.py) with ``downstream_agent_shapes`` set to the training grids,
  the one setting by which the two official models differ (golden README).
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import AgentPVT, build_backbone

from .golden import case_paths, official_arch

#: the fixture entry of ``arch`` that is not a backbone hyper-parameter
NOT_ARCH = ('out_indices', )


def fixture_arch(rec: dict) -> dict:
    return official_arch(rec, drop=NOT_ARCH)


def cases(family: str, names=None):
    return [pytest.param(family, p, id=f'{family}-{p.stem}') for p in case_paths(family)
            if names is None or p.stem in names]


# ------------------------------------------------------------------ logits
def _pre_head_tokens(family: str, rec: dict) -> torch.Tensor:
    """The official classifier's normalised last-stage tokens (B, N, C)."""
    ck = rec['checkpoint']
    tokens = rec['outputs'][3].flatten(2).transpose(1, 2)
    if family in ('litv2', 'focalnet'):
        return tokens * ck['norm.weight'] + ck['norm.bias']
    if family == 'dilateformer':
        return F.layer_norm(tokens, tokens.shape[-1:], ck['norm.weight'], ck['norm.bias'], 1e-6)
    if family == 'agent_pvt':
        arch = fixture_arch(rec)
        grids = [[math.isqrt(n)] * 2 for n in arch['agent_num']]
        model = build_backbone(family, dict(arch, downstream_agent_shapes=grids), drop_path_rate=0.)
        model.load_state_dict(AgentPVT.converter.official_to_ours(ck))
        with torch.no_grad():
            return model.eval()(rec['input'])[3].flatten(2).transpose(1, 2)
    return tokens


def efficientvit_logits(rec: dict) -> torch.Tensor:
    """mit-han-lab/efficientvit ``cls.py`` ``ClsHead`` on ``stage4``: 1x1
    ConvLayer (BN, hswish), global average pool, LinearLayer (no bias, LN,
    hswish), LinearLayer; eps 1e-5 (``set_norm_eps``)."""
    ck = {k[len('head.op_list.'):]: v for k, v in rec['checkpoint'].items()
          if k.startswith('head.op_list.')}
    x = F.conv2d(rec['outputs'][3], ck['0.conv.weight'])
    x = F.hardswish(F.batch_norm(x, ck['0.norm.running_mean'], ck['0.norm.running_var'],
                                 ck['0.norm.weight'], ck['0.norm.bias'], eps=1e-5))
    x = F.linear(x.mean((2, 3)), ck['2.linear.weight'])
    x = F.hardswish(F.layer_norm(x, x.shape[-1:], ck['2.norm.weight'], ck['2.norm.bias'], 1e-5))
    return F.linear(x, ck['3.linear.weight'], ck['3.linear.bias'])


def official_logits(family: str, rec: dict) -> torch.Tensor:
    ck = rec['checkpoint']
    if family == 'efficientvit':
        return efficientvit_logits(rec)
    return F.linear(_pre_head_tokens(family, rec).mean(1), ck['head.weight'], ck['head.bias'])


CLASSIFIER_CASES = (
    cases('pvtv2') + cases('p2t') + cases('quadtree', {'micro_B_clsfeatures'})
    + cases('litv2', {'micro_a05', 'micro_a09'}) + cases('dilateformer')
    + cases('focalnet', {'micro_srf', 'micro_lrf_layerscale'}) + cases('agent_pvt')
    + cases('efficientvit'))

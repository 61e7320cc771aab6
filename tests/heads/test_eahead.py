"""EAHead (EANet's external-attention decode head, arXiv:2105.02358): its
unit equals the official ``External_attention`` (golden fixture), it builds
from a config in an mmseg segmentor on different backbones and trains /
predicts, the shared memory gets both gradients, bad inputs are named."""
import pytest
import torch
from mmengine.config import ConfigDict
from mmengine.registry import DefaultScope, init_default_scope
from mmengine.structures import PixelData

from vattn_mm.heads import EAHead
from vattn_mm.layers import ExternalAttention, ExternalAttentionUnit

from ..backbone_cases import CASES
from ..golden import GOLDEN, assert_outputs_match, load_fixture, official_arch

NUM_CLASSES = 5
BN = dict(type='BN', requires_grad=True)


@pytest.fixture(autouse=True)
def mmseg_scope():
    with DefaultScope.overwrite_default_scope('mmseg'):
        init_default_scope('mmseg')
        yield


def build(cfg: dict):
    """Through mmseg's registry (EAHead is registered in MMEngine's root one)."""
    from mmseg.registry import MODELS
    return MODELS.build(ConfigDict(cfg))


def head_cfg(in_channels, **kwargs) -> dict:
    return dict(dict(type='EAHead', in_channels=in_channels, channels=16, ea_channels=24,
                     num_slots=8, num_classes=NUM_CLASSES, norm_cfg=BN), **kwargs)


def segmentor_cfg(backbone: str, channels: list) -> dict:
    """EncoderDecoder: a micro backbone, EAHead on its last map, mmseg's FCN
    auxiliary head on the third, as the ADE20K config."""
    return dict(
        type='EncoderDecoder',
        data_preprocessor=dict(type='SegDataPreProcessor', mean=[123.675, 116.28, 103.53],
                               std=[58.395, 57.12, 57.375], bgr_to_rgb=True, pad_val=0,
                               seg_pad_val=255, size=(64, 64)),
        backbone=dict(type=backbone, arch=CASES[backbone].micro, drop_path_rate=0.,
                      **CASES[backbone].micro_kwargs),
        decode_head=head_cfg(channels[-1]),
        auxiliary_head=dict(type='FCNHead', in_channels=channels[2], in_index=2, channels=8,
                            num_convs=1, concat_input=False, num_classes=NUM_CLASSES,
                            norm_cfg=BN, loss_decode=dict(type='CrossEntropyLoss',
                                                          loss_weight=0.4)),
        train_cfg=dict(), test_cfg=dict(mode='whole'))


def seg_batch(batch_size: int = 2, hw=(64, 64)) -> dict:
    from mmseg.structures import SegDataSample
    samples = []
    for _ in range(batch_size):
        sample = SegDataSample(metainfo=dict(img_shape=hw, ori_shape=hw, pad_shape=hw))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, NUM_CLASSES, (1, *hw)))
        samples.append(sample)
    return dict(inputs=[torch.randint(0, 255, (3, *hw), dtype=torch.uint8)
                        for _ in range(batch_size)], data_samples=samples)


# ------------------------------------------------------------ official unit
def official_case() -> dict:
    return load_fixture(GOLDEN / 'mixers' / 'external_attention.pt')


def test_unit_equals_official_external_attention():
    rec = official_case()
    unit = ExternalAttentionUnit.from_official(rec['checkpoint'], **official_arch(rec)).eval()
    with torch.no_grad():
        assert_outputs_match([unit(rec['input'])], rec['outputs'])


def test_head_unit_loads_official_weights_strictly_and_equals_official():
    """The head's unit is the official module: its weights load strictly
    (one memory entry) and it reproduces the fixture; the head runs on top."""
    rec = official_case()
    c = official_arch(rec)['c']
    head = build(head_cfg(c, ea_channels=c, num_slots=64)).eval()
    converted = ExternalAttention.convert_official_state_dict(rec['checkpoint'])
    head.external_attention.attention.load_state_dict(converted, strict=True)
    keys = [k for k in head.state_dict() if k.startswith('external_attention.')]
    assert sum('memory' in k for k in keys) == 1, keys
    with torch.no_grad():
        assert_outputs_match([head.external_attention(rec['input'])], rec['outputs'])
        logits = head([rec['input'][:, :c]])
    assert logits.shape == (1, NUM_CLASSES, 12, 16)


def test_unit_refuses_the_multi_head_module_and_wrong_maps():
    mh = load_fixture(GOLDEN / 'mixers' / 'external_attention_mh.pt')
    with pytest.raises(ValueError, match='got the multi_head form'):
        ExternalAttentionUnit.from_official(mh['checkpoint'], c=32)
    with pytest.raises(ValueError, match=r'expected a \(B, 16, H, W\) map, got \(1, 8, 4, 4\)'):
        ExternalAttentionUnit(16)(torch.randn(1, 8, 4, 4))


# ------------------------------------------------------------ shared memory
def test_shared_memory_gets_the_gradients_of_both_uses():
    """One parameter reads in and (transposed) out: its gradient is the sum
    of what two separate copies (official linear_0 / linear_1) would get."""
    torch.manual_seed(0)
    tied = ExternalAttentionUnit(16, num_slots=8).double()
    tied.init_weights()
    untied = ExternalAttention(16, num_heads=1, expansion=1, num_slots=8, memory_bias=False,
                               proj_bias=False, norm_cfg=dict(type='BN')).double()
    with torch.no_grad():
        sd = dict(tied.attention.state_dict(),
                  **{'memory_v.weight': tied.attention.memory_k.weight.t().clone()})
    untied.load_state_dict(sd)
    x = torch.randn(2, 16, 5, 7, dtype=torch.double)
    tied(x).square().sum().backward()
    tokens = x.flatten(2).transpose(1, 2)
    torch.relu(x + untied(tokens, (5, 7)).transpose(1, 2).reshape(2, 16, 5, 7)) \
        .square().sum().backward()
    expected = untied.memory_k.weight.grad + untied.memory_v.weight.grad.t()
    assert untied.memory_k.weight.grad.abs().sum() > 0 and untied.memory_v.weight.grad.abs().sum() > 0
    torch.testing.assert_close(tied.attention.memory_k.weight.grad, expected)


def test_official_initialisation():
    torch.manual_seed(0)
    unit = ExternalAttentionUnit(128, num_slots=64)
    unit.init_weights()
    std = (2 / 128) ** 0.5
    for linear in (unit.attention.in_proj, unit.attention.memory_k, unit.attention.proj):
        assert linear.weight.std().item() == pytest.approx(std, rel=0.05)
    assert (unit.attention.norm.weight == 1).all() and (unit.attention.norm.bias == 0).all()
    # the head's init_weights reaches the unit (mmengine calls the children's)
    head = build(head_cfg(32, ea_channels=128, num_slots=64))
    head.init_weights()
    memory = head.external_attention.attention.memory_k.weight
    assert memory.std().item() == pytest.approx(std, rel=0.05)


# ------------------------------------------------------------ in a segmentor
@pytest.mark.parametrize('backbone, channels', [('PVTv2', [8, 16, 24, 32]),
                                                ('FocalNet', [8, 16, 32, 64])])
def test_segmentor_trains_and_predicts(backbone, channels):
    torch.manual_seed(0)
    model = build(segmentor_cfg(backbone, channels))
    assert isinstance(model.decode_head, EAHead)
    model.init_weights()
    model.train()
    data = model.data_preprocessor(seg_batch(), True)
    losses = model(**data, mode='loss')
    assert {'decode.loss_ce', 'aux.loss_ce'} <= set(losses), sorted(losses)
    total = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(total)
    total.backward()
    memory = model.decode_head.external_attention.attention.memory_k.weight
    assert memory.grad is not None and memory.grad.abs().sum() > 0
    assert all(p.grad is not None for p in model.decode_head.parameters() if p.requires_grad)
    backbone_grads = [p.grad for p in model.backbone.parameters() if p.grad is not None]
    assert backbone_grads and any(g.abs().sum() > 0 for g in backbone_grads)

    model.eval()
    with torch.no_grad():
        results = model(**model.data_preprocessor(seg_batch(), False), mode='predict')
    assert len(results) == 2
    pred = results[0].pred_sem_seg.data
    assert pred.shape == (1, 64, 64) and 0 <= pred.min() and pred.max() < NUM_CLASSES


def test_several_levels_resized_and_concatenated():
    head = build(head_cfg([16, 24, 32], in_index=[1, 2, 3], input_transform='resize_concat'))
    assert head.in_channels == 72
    feats = [torch.randn(2, c, 32 // 2 ** i, 32 // 2 ** i) for i, c in enumerate([8, 16, 24, 32])]
    assert head(feats).shape == (2, NUM_CLASSES, 16, 16)


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize('kwargs, message', [
    (dict(in_channels=[16, 32]), 'in_channels must be one positive int'),
    (dict(in_channels=0), 'in_channels must be one positive int'),
    (dict(in_channels=32, in_index=[2, 3]), 'in_index must be one int'),
    (dict(in_channels=[16, 32], in_index=[3], input_transform='resize_concat'),
     'lists of the same length'),
    (dict(in_channels=32, input_transform='multiple_select'), 'the head takes one map'),
    (dict(in_channels=32, ea_channels=0), 'ea_channels must be a positive integer'),
    (dict(in_channels=32, num_slots=0), 'num_slots must be a positive integer'),
])
def test_bad_arguments_are_named(kwargs, message):
    in_channels = kwargs.pop('in_channels')
    with pytest.raises(ValueError, match=message):
        build(head_cfg(in_channels, **kwargs))


def test_in_channels_that_do_not_match_the_backbone_are_named():
    head = build(head_cfg(48))
    feats = [torch.randn(1, c, 4, 4) for c in (8, 16, 24, 32)]
    with pytest.raises(ValueError, match=r'expected 48 input channels at in_index=-1, got 32 '
                                         r'\(backbone outputs have channels \[8, 16, 24, 32\]\)'):
        head(feats)
